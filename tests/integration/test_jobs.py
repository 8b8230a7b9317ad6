"""The stream and the backfill on the real stack: what lands, what becomes a dead letter, kills, SIGTERM,
a stream and a backfill into one table at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pytest
from sqlalchemy import text

from streamfill import REPO_ROOT
from streamfill.errors import OptionError, SinkError
from streamfill.spark_jobs import backfill, quality, stream
from streamfill.spark_jobs.demo import events
from streamfill.spark_jobs.demo.produce import ensure_topic, produce
from tests.kafka_helpers import commit_as_connect, consume_all
from tests.kafka_helpers import produce as produce_records
from tests.lineage_receiver import receiver

pytestmark = pytest.mark.integration


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def demo_topic(bootstrap: str, topic: str, count: int, bad_ratio: float, partitions: int = 3, seed: int = 11):
    """Produce demo events; return (valid event ids, bad raw values) exactly as sent (short invalid JSON may
    repeat, so the bad ones are a list)."""
    now = datetime.now(timezone.utc)
    ensure_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, count, bad_ratio=bad_ratio, seed=seed, now=now)
    sent = list(events.records(count, bad_ratio, seed, now=now))
    return ({json.loads(v)["event_id"] for _, v, bad in sent if not bad}, [v for _, v, bad in sent if bad])


def landed(db, table: str, job: str) -> tuple[list[str], set[bytes], set[tuple[int, int]]]:
    """(event ids in the table, dead letters' raw values, every (partition, offset) accounted for)"""
    ids = [r[0] for r in query(db, f'SELECT event_id FROM "{table}"')]
    dead = query(db, "SELECT d.raw_value, d.partition, d.\"offset\" FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                     "WHERE j.name = :job", job=job)
    offsets = {(p, o) for p, o in query(db, f'SELECT partition, "offset" FROM "{table}"')}
    return ids, {bytes(r[0]) for r in dead}, offsets | {(r[1], r[2]) for r in dead}


def all_offsets(bootstrap: str, topic: str, partitions: int) -> set[tuple[int, int]]:
    return {(m.partition(), m.offset()) for m in consume_all(bootstrap, topic, partitions)}


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    """`streamfill ...` as its own process group, so a failpoint's SIGKILL takes the JVM and workers too."""
    if args[0] in ("stream", "backfill"):  # the demo's events, parsed by the orders entry
        args = (*args, "--pipeline", "orders")
    return subprocess.Popen([sys.executable, "-m", "streamfill.cli.main", *args], cwd=REPO_ROOT, start_new_session=True,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_the_stream_lands_exactly_the_valid_events_and_dead_letters_the_bad_ones(spark, stack_settings, bootstrap,
                                                                                db, topic_name, tmp_path):
    valid, bad = demo_topic(bootstrap, topic_name, 4000, 0.05)
    job, table = f"{topic_name}-stream", f"{topic_name}_events"
    args = stream.StreamArgs(job, topic_name, table, tmp_path / "ckpt", "available-now", 1500, pipeline="orders")
    reported: list[int] = []
    summary = stream.run(args, spark, {"bootstrap.servers": bootstrap}, stack_settings.offsets_db_url,
                         threading.Event(),
                         lambda progress: reported.append(progress["batchId"]))

    ids, dead, offsets = landed(db, table, job)
    assert len(ids) == len(valid) and set(ids) == valid
    assert dead == set(bad)
    assert offsets == all_offsets(bootstrap, topic_name, 3)  # every offset either a row or a dead letter
    assert len(offsets) == len(valid) + len(bad) == 4000
    assert (summary.status, summary.rows, summary.dead_letters) == ("succeeded", len(valid), len(bad))
    assert summary.batches >= 3  # 4000 offsets at most 1500 per micro-batch
    assert reported == list(range(summary.batches))  # one report per micro-batch, none twice, none missed
    # the run is recorded; dead letters carry the reason
    assert query(db, "SELECT r.status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j", j=job) == [
        ("succeeded",)]
    # every batch names the run that read it (the offset finder's "run")
    assert query(db, "SELECT count(*), count(DISTINCT b.run_id), bool_and(r.job_id = b.job_id) FROM batches b "
                     "JOIN jobs j ON j.id = b.job_id LEFT JOIN runs r ON r.id = b.run_id WHERE j.name = :j",
                 j=job) == [(summary.batches, 1, True)]
    reasons = {r[0].split(":")[0] for r in query(db, "SELECT error FROM dead_letters d JOIN jobs j ON "
                                                     "j.id = d.job_id WHERE j.name = :j", j=job)}
    assert "invalid JSON" in reasons and any(r.startswith("missing field") for r in reasons)


def test_backfills_by_offsets_and_by_times_read_what_a_bare_consumer_finds(spark, stack_settings, bootstrap, db,
                                                                           topic_name):
    base = int(time.time() * 1000) - 600_000  # ten minutes ago, 1 ms apart per record
    records = list(events.records(1200, 0.1, seed=5))
    ensure_topic(bootstrap, topic_name, 2)
    produce_records(bootstrap, topic_name, [{"key": k, "value": v, "partition": i % 2, "timestamp": base + i}
                                            for i, (k, v, _) in enumerate(records)])
    url = stack_settings.offsets_db_url
    every = consume_all(bootstrap, topic_name, 2)

    # by offsets: [100, 400) of partition 0 and [50, end) of partition 1
    by_offsets = backfill.BackfillArgs(f"{topic_name}-offsets", topic_name, '{"0": 100, "1": 50}', '{"0": 400}',
                                       f"{topic_name}_by_offsets", chunk_size=250, pipeline="orders")
    summary = backfill.run(by_offsets, spark, {"bootstrap.servers": bootstrap}, url)
    want = {(m.partition(), m.offset()) for m in every
            if (m.partition() == 0 and 100 <= m.offset() < 400) or (m.partition() == 1 and m.offset() >= 50)}
    assert landed(db, by_offsets.table, by_offsets.job)[2] == want
    assert summary.offsets == len(want) and summary.rows + summary.dead_letters == len(want)
    sizes = [n for (n,) in query(db, "SELECT sum(bo.end_offset - bo.start_offset) FROM batch_offsets bo JOIN batches "
                                     "b ON b.id = bo.batch_id JOIN jobs j ON j.id = b.job_id WHERE j.name = :j AND "
                                     "b.committed_at IS NOT NULL GROUP BY b.id", j=by_offsets.job)]
    assert summary.chunks == len(sizes) and sum(sizes) == len(want) and max(sizes) == 250, sizes

    # by times: records stamped in [base + 300, base + 900)
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()  # noqa: E731  one line the test reads at a glance
    by_times = backfill.BackfillArgs(f"{topic_name}-times", topic_name, iso(base + 300), iso(base + 900),
                                     f"{topic_name}_by_times", chunk_size=10_000, pipeline="orders")
    backfill.run(by_times, spark, {"bootstrap.servers": bootstrap}, url)
    want = {(m.partition(), m.offset()) for m in every if base + 300 <= m.timestamp()[1] < base + 900}
    assert len(want) == 600
    ids, dead, offsets = landed(db, by_times.table, by_times.job)
    assert offsets == want
    assert dead == {v for i, (_, v, is_bad) in enumerate(records) if is_bad and 300 <= i < 900}
    assert set(ids) == {json.loads(v)["event_id"] for i, (_, v, is_bad) in enumerate(records)
                        if not is_bad and 300 <= i < 900}


def test_a_killed_backfill_resumes_and_a_finished_one_changes_nothing(spark, stack_settings, bootstrap, db,
                                                                       topic_name, tmp_path):
    valid, bad = demo_topic(bootstrap, topic_name, 2000, 0.03)
    job, table = f"{topic_name}-bf", f"{topic_name}_bf"
    base = ["backfill", "--job", job, "--topic", topic_name, "--from", "earliest", "--to", "latest",
            "--table", table, "--chunk-size", "400"]
    # SIGKILL of driver, JVM and workers: once between a chunk's write and its commit, once right after one
    for point, at in (("sink.staged", 3), ("sink.committed", 2)):
        hits = tmp_path / f"fp-{point}"
        code, out = finish(cli(*base, env={"STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_AT": str(at),
                                           "STREAMFILL_FAILPOINT_DIR": str(hits)}))
        assert code == -signal.SIGKILL or code == 137, out

    # the rest in the run's SparkSession (the killed launches are the CLI's above): it resumes, then the same
    # backfill again changes nothing, and in replace mode rewrites the same rows
    def again(mode: str, chunk: int) -> backfill.Summary:
        return backfill.run(backfill.BackfillArgs(job, topic_name, "earliest", "latest", table, mode, chunk,
                                                  pipeline="orders"), spark, {"bootstrap.servers": bootstrap},
                            stack_settings.offsets_db_url)

    assert again("append-new", 400).state == "resuming"
    ids, dead, offsets = landed(db, table, job)
    assert len(ids) == len(valid) and set(ids) == valid and dead == set(bad)
    assert offsets == all_offsets(bootstrap, topic_name, 3)

    def state():
        rows = query(db, f'SELECT md5(string_agg(t::text, \',\' ORDER BY partition, "offset")), max(xmin::text::bigint) '
                         f'FROM "{table}" t')
        batches = query(db, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j", j=job)
        return rows[0], batches[0][0]

    before = state()
    assert again("append-new", 400).state == "complete"
    assert state() == before  # not a row touched, no batch planned

    assert again("replace", 5000).state == "new pass"
    after = state()
    assert after[0][0] == before[0][0]  # the same rows ...
    assert after[0][1] > before[0][1] and after[1] == before[1] + 1  # ... rewritten by one new chunk


def test_sigterm_ends_the_stream_between_batches_and_a_restart_continues(spark, stack_settings, bootstrap, db,
                                                                          topic_name, tmp_path):
    valid, bad = demo_topic(bootstrap, topic_name, 6000, 0.02)
    job, table = f"{topic_name}-term", f"{topic_name}_term"
    grace = 6.0
    base = ["stream", "--job", job, "--topic", topic_name, "--table", table, "--max-offsets-per-trigger", "300",
            "--checkpoint", str(tmp_path / "ckpt"), "--stop-grace", f"{grace:g}s"]
    with receiver() as lineage:
        parent = "airflow-ns/some_dag.some_task/01968a5c-0000-7000-8000-000000000001"
        proc = cli(*base, "--trigger", "3s", env={**lineage.env, "OPENLINEAGE_PARENT_ID": parent})
        committed = ("SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j "
                     "AND committed_at IS NOT NULL")
        deadline = time.monotonic() + 300
        while (not query(db, "SELECT 1 FROM jobs WHERE name = :j", j=job) or query(db, committed, j=job)[0][0] < 2) \
                and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.5)
        # a colleague's transaction holds the launch's run row, so recording its end waits past the stop's grace:
        # once the query has stopped, the launch shuts down however long that takes, never cut by the grace
        with db.connect() as colleague:
            colleague.execute(text("SELECT 1 FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j "
                                   "FOR NO KEY UPDATE OF r"), {"j": job})
            holder = colleague.execute(text("SELECT pg_backend_pid()")).scalar()
            proc.send_signal(signal.SIGTERM)  # to the driver process only, as `kill PID` does
            graced = time.monotonic() + grace
            while not query(db, "SELECT count(*) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid)) "
                                "AND query ILIKE 'UPDATE %runs%'", holder=holder)[0][0]:
                assert proc.poll() is None and time.monotonic() < graced, \
                    "the batch in flight commits within the grace"
                time.sleep(0.2)
            with pytest.raises(subprocess.TimeoutExpired):  # the launch outlives its grace, waiting for the row
                proc.wait(graced + 2 - time.monotonic())
            colleague.rollback()
        code, out = finish(proc, 300)
    assert code == 0, out
    assert f"stream {job} stopped" in out and "did not commit" not in out
    # nothing half-done: every planned batch committed, the table holds exactly what they read
    pending = query(db, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j "
                        "AND committed_at IS NULL", j=job)
    assert pending == [(0,)]
    read = query(db, "SELECT coalesce(sum(next_offset), 0) FROM latest_offsets WHERE job = :j", j=job)[0][0]
    assert 600 <= read < 6000
    assert len(landed(db, table, job)[2]) == read
    assert query(db, "SELECT status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j", j=job) == [
        ("stopped",)]
    # lineage: the stream's run, under the parent it was given, reading the topic and writing the table
    assert lineage.invalid == []
    assert [e["eventType"] for e in lineage.events] == ["START", "COMPLETE"]
    start = lineage.events[0]
    assert start["job"]["name"] == job and start["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    given = start["run"]["facets"]["parent"]["job"]
    assert (given["namespace"], given["name"]) == ("airflow-ns", "some_dag.some_task")
    assert [i["name"] for i in start["inputs"]] == [topic_name]
    assert start["outputs"][0]["name"] == f"{stack_settings.db_name}.public.{table}"
    assert query(db, "SELECT lineage_run_id::text FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j",
                 j=job) == [(start["run"]["runId"],)]

    # the restart continues, in the run's SparkSession and in bigger batches (a batch's size may change between
    # launches)
    stream.run(stream.StreamArgs(job, topic_name, table, tmp_path / "ckpt", "available-now", 3000, pipeline="orders"),
               spark, {"bootstrap.servers": bootstrap}, stack_settings.offsets_db_url, threading.Event())
    ids, dead, offsets = landed(db, table, job)
    assert len(ids) == len(valid) and set(ids) == valid and dead == set(bad)
    # each batch names the launch that read it: the stopped one's first, then the restart's
    by_seq = [r[0] for r in query(db, "SELECT b.run_id FROM batches b JOIN jobs j ON j.id = b.job_id WHERE "
                                      "j.name = :j ORDER BY b.seq", j=job)]
    runs = [r[0] for r in query(db, "SELECT r.id FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j "
                                    "ORDER BY r.id", j=job)]
    assert len(runs) == 2 and set(by_seq) == set(runs) and by_seq == sorted(by_seq), (by_seq, runs)


def test_a_stream_and_a_backfill_over_the_same_offsets_into_one_table_land_each_key_once(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path):
    """The backfill is a launch of its own (the CLI); the stream runs meanwhile in the run's SparkSession."""
    valid, bad = demo_topic(bootstrap, topic_name, 2500, 0.02)
    table = f"{topic_name}_shared"
    b = cli("backfill", "--job", f"{topic_name}-b", "--topic", topic_name, "--from", "earliest", "--to", "latest",
            "--table", table, "--chunk-size", "900")
    deadline = time.monotonic() + 180
    while not query(db, "SELECT 1 FROM jobs WHERE name = :j", j=f"{topic_name}-b"):  # the backfill is about to write
        assert b.poll() is None and time.monotonic() < deadline, finish(b)[1][-3000:]
        time.sleep(0.2)
    stream.run(stream.StreamArgs(f"{topic_name}-s", topic_name, table, tmp_path / "ckpt", "available-now", 700,
                                 pipeline="orders"), spark, {"bootstrap.servers": bootstrap},
               stack_settings.offsets_db_url, threading.Event())
    code, out = finish(b)
    assert code == 0, out
    ids = [r[0] for r in query(db, f'SELECT event_id FROM "{table}"')]
    assert len(ids) == len(set(ids)) == len(valid) and set(ids) == valid
    for job in (f"{topic_name}-s", f"{topic_name}-b"):  # each job read everything and recorded its dead letters
        assert landed(db, table, job)[1] == set(bad)


def test_a_backfill_into_a_table_that_does_not_fit_records_nothing_and_runs_once_the_table_is_right(
        spark, stack_settings, bootstrap, db, topic_name):
    valid, bad = demo_topic(bootstrap, topic_name, 300, 0.05, partitions=2)
    job, url = f"{topic_name}-table", stack_settings.offsets_db_url
    wrong = f"{topic_name}_wrong"
    with db.begin() as conn:  # user_id is written as bigint, which text is no widening to
        conn.exec_driver_sql(f'CREATE TABLE "{wrong}" (topic text, partition integer, "offset" bigint, '
                             'user_id text, UNIQUE (topic, partition, "offset"))')

    def recorded() -> list[tuple]:
        return query(db, "SELECT (SELECT count(*) FROM jobs WHERE name = :j), (SELECT count(*) FROM runs r JOIN "
                         "jobs j ON j.id = r.job_id WHERE j.name = :j), (SELECT count(*) FROM batches b JOIN jobs j "
                         "ON j.id = b.job_id WHERE j.name = :j)", j=job)

    with pytest.raises(OptionError, match="--table 'a.b.c' is not a table name"):
        backfill.BackfillArgs(job, topic_name, "earliest", "latest", "a.b.c", pipeline="orders")
    for table, message in (
            (wrong, f"table public.{wrong} has column user_id of type text, but it is written as bigint"
                    f" .*ALTER TABLE \"public\".\"{wrong}\" ALTER COLUMN \"user_id\" TYPE bigint"),
            (f"{topic_name}_none.events", f"schema {topic_name}_none does not exist. Create it \\(CREATE SCHEMA")):
        args = backfill.BackfillArgs(job, topic_name, "earliest", "latest", table, chunk_size=200, pipeline="orders")
        with pytest.raises(SinkError, match=message):
            backfill.run(args, spark, {"bootstrap.servers": bootstrap}, url)
        assert recorded() == [(0, 0, 0)], f"{table}: nothing recorded, so nothing refuses the right table later"

    right = f"{topic_name}_right"
    args = backfill.BackfillArgs(job, topic_name, "earliest", "latest", right, chunk_size=200, pipeline="orders")
    summary = backfill.run(args, spark, {"bootstrap.servers": bootstrap}, url)
    assert summary.state == "new" and summary.offsets == 300
    ids, dead, offsets = landed(db, right, job)
    assert set(ids) == valid and dead == set(bad) and len(offsets) == 300
    assert recorded() == [(1, 1, 2)]


def test_quality_checks_a_table_in_a_schema_of_its_own(spark, stack_settings, bootstrap, db, topic_name):
    valid, bad = demo_topic(bootstrap, topic_name, 200, 0.05, partitions=2)
    schema, url = f"{topic_name}_q", stack_settings.offsets_db_url
    table = f"{schema}.Events"  # each part quoted on its own: a mixed-case name survives only that way
    with db.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    args = backfill.BackfillArgs(f"{topic_name}-q", topic_name, "earliest", "latest", table, pipeline="orders")
    backfill.run(args, spark, {"bootstrap.servers": bootstrap}, url)
    assert query(db, f'SELECT count(*) FROM "{schema}"."Events"') == [(len(valid),)]
    for whole in (False, True):
        outcome = quality.validate(url, table, args.job, pipeline="orders", whole_table=whole)
        assert outcome.success, outcome.lines
        assert outcome.statistics["evaluated_expectations"] >= 5
        assert not [line for line in outcome.lines if "could not run" in line]
    with db.begin() as conn:  # a consumed offset neither landed nor dead-lettered: the suite reads this table
        conn.exec_driver_sql(f'DELETE FROM "{schema}"."Events" WHERE (partition, "offset") = '
                             f'(SELECT partition, "offset" FROM "{schema}"."Events" LIMIT 1)')
    outcome = quality.validate(url, table, args.job, pipeline="orders", whole_table=True)
    assert not outcome.success
    assert [line for line in outcome.lines if line.startswith("FAIL rows landed + dead letters")], outcome.lines


@pytest.mark.parametrize("from_, to, topic_suffix, message", [
    ('{"0": 4}', '{"0": 2}', "", "start offset 4 > end offset 2; choose a --to at or after --from"),
    ('{"2": 0}', "latest", "", "names partition 2, but topic 't_"),
    ("2099-01-01T00:00:00Z", "latest", "", "is in the future"),
    ("earliest", "latest", "_missing", "does not exist; existing topics:"),
])
def test_bad_backfill_input_fails_before_spark_with_the_value_and_the_fix(bootstrap, topic_name, from_, to,
                                                                         topic_suffix, message):
    ensure_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 10)
    code, out = finish(cli("backfill", "--job", "x-bad", "--topic", topic_name + topic_suffix, "--from", from_,
                           "--to", to), 120)
    assert code == 2  # bad input (docs/operations.md#exit-codes)
    assert message in out.replace("\n", " ")
    assert "log4j" not in out  # refused before a Spark JVM started


class Cluster(NamedTuple):
    master: str  # spark://...
    python: Path  # the workers' interpreter: PySpark and streamfill's dependencies, not streamfill


# imported at each start of the workers' interpreter (a .pth line): which interpreter ran where, and whether
# streamfill was importable before Spark added the archive a launch shipped; to stderr, the executor's log
PROBE = """import importlib.util, os, sys
found = 'present' if importlib.util.find_spec('streamfill') else 'absent'
sys.stderr.write(f"streamfill-probe python={sys.executable} streamfill={found} cwd={os.getcwd()}\\n")
"""


def workers_python(folder: Path) -> Path:
    """A venv whose site-packages names .venv's by a .pth file: PySpark and the dependencies, but not streamfill,
    whose editable install is a .pth of .venv's own (a folder a .pth adds is not searched for .pth files)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3.*/site-packages"))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "streamfill_probe.py").write_text(PROBE)
    (site / "probe.pth").write_text("import streamfill_probe\n")  # after dependencies.pth: names sort
    return folder / "bin" / "python"


@pytest.fixture
def standalone_cluster(tmp_path):
    """A Spark master and one worker from the installed PySpark (spark-class), on free local ports, as on a team's
    cluster: the worker has the dependencies but not streamfill (workers_python), and runs outside the
    repository without its PYTHONPATH."""
    import socket

    import pyspark

    python = workers_python(tmp_path / "workers-venv")
    outside = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([str(python), "-c", "import streamfill"], cwd=tmp_path, env=outside,
                           capture_output=True, text=True)
    assert found.returncode != 0 and "No module named 'streamfill'" in found.stderr, found.stderr
    found = subprocess.run([str(python), "-c", "import pyspark, confluent_kafka, sqlalchemy, psycopg2, pgpq"],
                           cwd=tmp_path, env=outside, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    home = Path(pyspark.__file__).parent
    env = {**outside, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "SPARK_LOG_DIR": str(tmp_path)}
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    logs = [open(tmp_path / "master.log", "w"), open(tmp_path / "worker.log", "w")]
    procs = [subprocess.Popen([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                              env=env, cwd=tmp_path, stdout=logs[0], stderr=subprocess.STDOUT,
                              start_new_session=True)]
    procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                                   "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()), master_url],
                                  env=env, cwd=tmp_path, stdout=logs[1], stderr=subprocess.STDOUT,
                                  start_new_session=True))
    deadline = time.monotonic() + 120
    while "Successfully registered with master" not in (tmp_path / "worker.log").read_text():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            (tmp_path / "master.log").read_text()[-2000:] + (tmp_path / "worker.log").read_text()[-2000:]
        time.sleep(0.5)
    yield Cluster(master_url, python)
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        p.wait(60)
    for f in logs:
        f.close()


def test_the_stream_and_a_backfill_on_a_standalone_cluster_without_streamfill_give_local_modes_table(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path, standalone_cluster):
    demo_topic(bootstrap, topic_name, 3000, 0.05)
    local, remote, backfilled = f"{topic_name}_local", f"{topic_name}_cluster", f"{topic_name}_cluster_bf"
    stream.run(stream.StreamArgs(f"{topic_name}-local", topic_name, local, tmp_path / "c1", "available-now", 1000,
                                 pipeline="orders"),
               spark, {"bootstrap.servers": bootstrap}, stack_settings.offsets_db_url, threading.Event())
    # the executors' interpreter is the driver's PYSPARK_PYTHON; streamfill reaches them in the launch's archive
    on_cluster = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(standalone_cluster.python)}
    code, out = finish(cli("stream", "--job", f"{topic_name}-cluster", "--topic", topic_name, "--table", remote,
                           "--trigger", "available-now", "--max-offsets-per-trigger", "1000", "--checkpoint",
                           str(tmp_path / "c2"), "--master", standalone_cluster.master, env=on_cluster))
    assert code == 0, out
    code, out = finish(cli("backfill", "--job", f"{topic_name}-cluster-bf", "--topic", topic_name, "--from",
                           "earliest", "--to", "latest", "--table", backfilled, "--chunk-size", "1000", "--master",
                           standalone_cluster.master, env=on_cluster))
    assert code == 0, out
    apps = sorted((tmp_path / "work").glob("app-*"))
    assert len(apps) == 2, f"executors of the stream and the backfill on the worker, not {apps}"
    for app in apps:
        logs = "".join(p.read_text() for p in app.glob("*/stderr"))
        # the workers' venv started without streamfill, and imported it from the archive the launch shipped
        assert f"streamfill-probe python={standalone_cluster.python} streamfill=absent" in logs, logs[-3000:]
        assert "streamfill=present" not in logs
        assert list(app.glob("*/streamfill-py-*.zip")), f"no archive of streamfill in {app}"
    cols = "topic, partition, \"offset\", event_id, user_id, event_type, amount, currency, event_time"
    for table in (remote, backfilled):
        assert query(db, f'SELECT count(*) FROM "{table}"') == query(db, f'SELECT count(*) FROM "{local}"')
        assert query(db, f'SELECT {cols} FROM "{local}" EXCEPT SELECT {cols} FROM "{table}"') == []
        assert query(db, f'SELECT {cols} FROM "{table}" EXCEPT SELECT {cols} FROM "{local}"') == []


def group_offsets(kafka: dict, group: str, timeout_s: float = 180) -> dict[int, int]:
    """The group's committed offsets per partition, asked until the broker's group coordinator answers."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka.admin import AdminClient

    admin, deadline = AdminClient(kafka), time.monotonic() + timeout_s
    while True:
        try:
            found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
            return {tp.partition: tp.offset for tp in found.topic_partitions}
        except (KafkaException, TimeoutError):
            assert time.monotonic() < deadline, f"the broker's group coordinator did not answer for group {group}"


def test_a_new_stream_starts_where_its_entry_says_and_keeps_that_start_until_its_first_batch(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path):
    """`start: latest`: the first launch reads nothing of what the topic held, and its start is offsets_db's
    from then on, so a relaunch before any batch reads exactly what arrived in between; the entry's
    `commit_to_group` mirrors its offsets. `--start <time>`: the first record at or after that time."""
    from tests.job_helpers import orders_columns, run_here

    ensure_topic(bootstrap, topic_name, 2)
    hour = 3_600_000
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)

    def send(count: int, seed: int, at_ms: int) -> set[str]:
        sent = list(events.records(count, 0.0, seed, now=datetime.now(timezone.utc)))
        produce_records(bootstrap, topic_name, [{"value": v, "partition": i % 2, "timestamp": at_ms + i}
                                                for i, (_, v, _) in enumerate(sent)])
        return {json.loads(v)["event_id"] for _, v, _ in sent}

    send(300, 31, now_ms - 2 * hour)  # what the topic held before the entry existed
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  {topic_name}:\n    topic: {topic_name}\n    table: {topic_name}_latest\n"
                    f"    start: latest\n    commit_to_group: {topic_name}-lag\n" + orders_columns(4))
    kafka = {"bootstrap.servers": bootstrap}

    def launch(job: str, table: str, start: str | None = None) -> tuple[int, str]:
        return run_here(str(jobs), lambda: stream.run(
            stream.StreamArgs(job, topic_name, table, tmp_path / job, "available-now", None, start=start,
                              pipeline=topic_name), spark, kafka, stack_settings.offsets_db_url, threading.Event()))

    code, out = launch(topic_name, f"{topic_name}_latest")
    assert code == 0, out
    assert query(db, f'SELECT count(*) FROM "{topic_name}_latest"') == [(0,)]
    assert dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j",
                      j=topic_name)) == {0: 150, 1: 150}, "the start is offsets_db's before any batch"

    arrived = send(200, 32, now_ms - hour)  # between the two launches
    group = f"{topic_name}-lag"
    group_offsets(kafka, group)  # a fresh broker makes its group coordinator on first use: ready before the commit
    code, out = launch(topic_name, f"{topic_name}_latest")
    assert code == 0, out
    assert {r[0] for r in query(db, f'SELECT event_id FROM "{topic_name}_latest"')} == arrived
    assert query(db, f'SELECT count(*) FROM "{topic_name}_latest"') == [(200,)]
    assert dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j",
                      j=topic_name)) == {0: 250, 1: 250}
    # the entry's commit_to_group: lag tools see the job in its consumer group
    assert group_offsets(kafka, group) == {0: 250, 1: 250}

    between = (datetime.fromtimestamp((now_ms - 1.5 * hour) / 1000, timezone.utc)).isoformat()
    code, out = launch(f"{topic_name}-t", f"{topic_name}_since", start=between)
    assert code == 0, out
    assert {r[0] for r in query(db, f'SELECT event_id FROM "{topic_name}_since"')} == arrived
    assert query(db, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j "
                     "AND b.committed_at IS NULL", j=f"{topic_name}-t") == [(0,)]


def test_a_stream_takes_over_from_a_stopped_kafka_connect_sink_at_its_groups_offsets_each_record_once(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path):
    """The switch of docs/from-connect.md: a JDBC sink's configuration becomes the entry (`jobs from-connect
    --columns-from-table`, the table the connector wrote); while the connector's consumer group has a live member
    the launch is refused; once it has none, the stream lands exactly the records after the group's committed
    offsets (a partition without one from its start), rows + dead letters = offsets, nothing twice. The group is
    read once: a first launch that committed nothing keeps the start it read, and a job that committed resumes
    from offsets_db, however the group moved since."""
    from confluent_kafka import Consumer
    from sqlalchemy import make_url
    from typer.testing import CliRunner

    from streamfill.cli.commands.jobs import app
    from tests.job_helpers import run_here

    ensure_topic(bootstrap, topic_name, 3)

    def send(count: int, seed: int) -> None:
        sent = list(events.records(count, 0.05, seed, now=datetime.now(timezone.utc)))
        produce_records(bootstrap, topic_name, [{"value": v, "partition": i % 3} for i, (_, v, _) in enumerate(sent)])

    send(300, 41)  # 100 records in each partition
    connector, table = f"{topic_name}-sink", f"{topic_name}_connect"
    group = f"connect-{connector}"
    committed = {0: 40, 1: 70}  # where the connector stopped; it committed nothing of partition 2
    commit_as_connect(bootstrap, group, topic_name, committed)
    with db.begin() as conn:  # the table the connector created (auto.create), keyed by pk.fields
        conn.execute(text(f'CREATE TABLE "{table}" (event_id text PRIMARY KEY, user_id bigint NOT NULL, event_type '
                          'text NOT NULL, amount numeric(12,2) NOT NULL, currency text NOT NULL, event_time '
                          'timestamptz NOT NULL)'))
    ours = make_url(stack_settings.offsets_db_url)
    config = tmp_path / "sink.json"
    config.write_text(json.dumps({"name": connector, "config": {
        "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "tasks.max": "1", "topics": topic_name,
        "connection.url": f"jdbc:postgresql://{ours.host}:{ours.port}/{ours.database}", "connection.user": "connect",
        "connection.password": "connect-secret", "insert.mode": "upsert", "pk.mode": "record_value",
        "pk.fields": "event_id", "table.name.format": table, "auto.create": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{topic_name}-dlq"}}))
    jobs = tmp_path / "jobs.yaml"
    done = CliRunner().invoke(app, ["from-connect", str(config), "--columns-from-table", "--output", str(jobs)])
    assert done.exit_code == 0, done.output
    written = jobs.read_text()
    assert f"start: group:{group}" in written and "connect-secret" not in written
    assert "amount: {type: 'decimal(12,2)', required: true}" in written and "key: [event_id]" in written, written
    kafka, url = {"bootstrap.servers": bootstrap}, stack_settings.offsets_db_url

    def launch(job: str, into: str, checkpoint: str, start: str | None = None) -> tuple[int, str]:
        return run_here(str(jobs), lambda: stream.run(
            stream.StreamArgs(job, None, into, tmp_path / checkpoint, "available-now", None, start=start,
                              pipeline=connector), spark, kafka, url, threading.Event()))

    def position(job: str) -> dict[int, int]:
        return dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j", j=job))

    def accounted(job: str, into: str) -> tuple[set[tuple[int, int]], int]:
        """(every (partition, offset) a row or a dead letter holds, how many rows and dead letters there are)"""
        rows = query(db, f'SELECT partition, "offset" FROM "{into}"')
        dead = query(db, 'SELECT d.partition, d."offset" FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE '
                         "j.name = :j", j=job)
        return {tuple(r) for r in rows + dead}, len(rows) + len(dead)

    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "client.id": f"connector-consumer-{connector}-0"})
    try:
        member.subscribe([topic_name])
        deadline = time.monotonic() + 60
        while not member.assignment():  # the connector's task is running: a member of its group
            assert time.monotonic() < deadline, "the consumer never joined its group"
            member.poll(0.5)
        code, out = launch(connector, table, "ck")
    finally:
        member.close()
    assert code == 1, out
    assert f"consumer group '{group}'" in out and f"connector-consumer-{connector}-0" in out, out
    assert f"/connectors/{connector}/stop" in out, out
    assert position(connector) == {} and query(db, f'SELECT count(*) FROM "{table}"') == [(0,)], "nothing recorded"

    code, out = launch(connector, table, "ck")
    assert code == 0, out
    want = {(m.partition(), m.offset()) for m in consume_all(bootstrap, topic_name, 3)
            if m.offset() >= committed.get(m.partition(), 0)}
    assert len(want) == 60 + 30 + 100
    assert accounted(connector, table) == (want, len(want)), "each record after the group's offsets, once"
    assert position(connector) == {0: 100, 1: 100, 2: 100}

    # a connector that had caught up: its group stands at the log end, and the first launch has nothing to read
    late, late_group = f"{topic_name}-late", f"connect-{topic_name}-late"
    commit_as_connect(bootstrap, late_group, topic_name, {0: 100, 1: 100, 2: 100})
    code, out = launch(late, f"{topic_name}_late", "ck-late", start=f"group:{late_group}")
    assert code == 0, out
    assert position(late) == {0: 100, 1: 100, 2: 100}, "the start read from the group is offsets_db's at once"
    assert accounted(late, f"{topic_name}_late") == (set(), 0)

    # both groups move back to the log start (a connector run again by mistake, a reset); more records arrive
    for moved in (group, late_group):
        commit_as_connect(bootstrap, moved, topic_name, {0: 0, 1: 0, 2: 0})
    send(60, 42)
    arrived = {(m.partition(), m.offset()) for m in consume_all(bootstrap, topic_name, 3) if m.offset() >= 100}
    code, out = launch(connector, table, "ck-new")  # another checkpoint: where it starts is offsets_db's alone
    assert code == 0, out
    assert accounted(connector, table) == (want | arrived, len(want) + 60)
    code, out = launch(late, f"{topic_name}_late", "ck-late", start=f"group:{late_group}")
    assert code == 0, out
    assert accounted(late, f"{topic_name}_late") == (arrived, 60), "what arrived after the start it kept, once"


def test_a_stream_given_a_stale_or_another_jobs_checkpoint_sets_it_aside_and_resumes_from_offsets_db(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path, capsys):
    """A checkpoint behind offsets_db (a copy from an earlier moment, another Airflow worker's disk) or of another
    job: the stream renames it beside itself, says so, and reads from where offsets_db says, exactly once."""
    import shutil

    from tests.job_helpers import run_here

    valid, bad = demo_topic(bootstrap, topic_name, 600, 0.05)
    kafka, url = {"bootstrap.servers": bootstrap}, stack_settings.offsets_db_url
    job, table = f"{topic_name}-ck", f"{topic_name}_ck"

    def launch(name: str, checkpoint, into: str = table) -> tuple[int, str]:
        return run_here(str(REPO_ROOT / "dags" / "streamfill_jobs.yaml"), lambda: stream.run(
            stream.StreamArgs(name, topic_name, into, checkpoint, "available-now", 250, pipeline="orders"),
            spark, kafka, url, threading.Event()))

    assert launch(job, tmp_path / "ck")[0] == 0
    shutil.copytree(tmp_path / "ck", tmp_path / "stale")
    more, more_bad = demo_topic(bootstrap, topic_name, 400, 0.05, seed=12)
    assert launch(job, tmp_path / "ck")[0] == 0
    last, last_bad = demo_topic(bootstrap, topic_name, 300, 0.05, seed=13)
    code, out = launch(job, tmp_path / "stale")  # a checkpoint 400 offsets behind offsets_db
    assert code == 0, out
    aside = list(tmp_path.glob("stale.set-aside-*"))
    assert len(aside) == 1 and (aside[0] / "offsets").is_dir(), "kept beside, as it was"
    said = " ".join(capsys.readouterr().out.split())
    assert f"stream {job}: its checkpoint disagreed with offsets_db; set aside as" in said, said
    ids, dead, offsets = landed(db, table, job)
    assert len(ids) == len(set(ids)) and set(ids) == valid | more | last, "every record once"
    assert offsets == all_offsets(bootstrap, topic_name, 3)

    # the same stale copy under a job that has no position: another job's checkpoint, set aside too
    shutil.copytree(tmp_path / "ck", tmp_path / "foreign")
    other = f"{topic_name}-other"
    code, out = launch(other, tmp_path / "foreign", f"{table}_other")
    assert code == 0, out
    assert len(list(tmp_path.glob("foreign.set-aside-*"))) == 1
    assert {r[0] for r in query(db, f'SELECT event_id FROM "{table}_other"')} == valid | more | last


def test_a_job_pruned_between_launches_resumes_exactly_once_and_its_views_page_and_quality_answer(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path):
    """Every age at a millisecond: a dry run changes nothing; a prune leaves what the job resumes from (its
    newest committed batch, the batches its snapshot names) and removes the rest and every dead letter; the next
    launch goes on exactly once, and the whole-table quality check reconciles the batches whose dead letters are
    still there."""
    from datetime import timedelta

    from streamfill.offsets_db import dashboard
    from streamfill.offsets_db.engine import make_engine
    from streamfill.retention_ages import Retention
    from streamfill.spark_jobs.maintenance import prune

    valid, bad = demo_topic(bootstrap, topic_name, 900, 0.05)
    url, job, table = stack_settings.offsets_db_url, f"{topic_name}-pruned", f"{topic_name}_pruned"

    def launch() -> None:
        stream.run(stream.StreamArgs(job, topic_name, table, tmp_path / "ck", "available-now", 300, pipeline="orders"),
                   spark, {"bootstrap.servers": bootstrap}, url, threading.Event())

    def held() -> dict[str, int]:
        return {t: query(db, f"SELECT count(*) FROM {t} t JOIN jobs j ON j.id = t.job_id WHERE j.name = :j",
                         j=job)[0][0] for t in ("batches", "dead_letters", "runs", "quality_results")}

    launch()
    assert quality.validate(url, table, job, pipeline="orders", whole_table=True).success
    before, latest = held(), query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j ORDER BY 1",
                                   j=job)
    assert before["batches"] >= 3 and before["dead_letters"] == len(bad)
    at_once = Retention(**{kind: timedelta(milliseconds=1) for kind in Retention.kinds()})

    dry = {r.what: r.rows for r in prune(url, at_once, apply=False, jobs=[job]).removed}
    assert dry["dead letters"] == len(bad) and dry["committed batches (with their offsets)"] >= 1
    assert held() == before, "a dry run removes nothing"

    applied = prune(url, at_once, apply=True, jobs=[job])
    assert {r.what: r.rows for r in applied.removed}["committed batches (with their offsets)"] == \
        dry["committed batches (with their offsets)"]
    kept = query(db, "SELECT b.id FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j ORDER BY 1", j=job)
    needed = query(db, "SELECT DISTINCT s.batch_id FROM snapshots s JOIN jobs j ON j.id = s.job_id WHERE j.name = :j "
                       "UNION SELECT max(b.id) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j "
                       "ORDER BY 1", j=job)
    assert kept == needed, "what the job resumes from stays, nothing else"
    assert held()["dead_letters"] == 0 and held()["quality_results"] == 1, "the newest verdict stays"
    assert query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j ORDER BY 1", j=job) == latest

    more, more_bad = demo_topic(bootstrap, topic_name, 300, 0.05, seed=12)
    launch()
    ids = [r[0] for r in query(db, f'SELECT event_id FROM "{table}"')]
    assert len(ids) == len(set(ids)) and set(ids) == valid | more, "every record once across the prune"
    assert query(db, "SELECT sum(next_offset) FROM latest_offsets WHERE job = :j", j=job) == [(1200,)]
    assert held()["dead_letters"] == len(more_bad)
    outcome = quality.validate(url, table, job, pipeline="orders", whole_table=True)
    assert outcome.success, outcome.lines
    # the page's queries and the views answer for the pruned job
    engine = make_engine(url)
    try:
        row = dashboard.overview(engine, datetime.now(timezone.utc), [job], only=[job])[0]
        assert row["name"] == job and dashboard.job(engine, job) is not None
    finally:
        engine.dispose()
    for view in ("offset_history", "latest_offsets", "consumer_lag", "lag_history", "batch_throughput"):
        assert query(db, f"SELECT count(*) FROM {view} WHERE job = :j", j=job)[0][0] > 0, view


def test_metrics_scraped_from_a_running_streams_prometheus_endpoint_match_offsets_db(
        spark, stack_settings, bootstrap, db, topic_name, tmp_path, monkeypatch):
    """OTEL_METRICS_EXPORTER=prometheus: while the stream runs, its endpoint says what offsets_db says: rows,
    dead letters and commits of this launch, lag per partition, and the newest committed record's timestamp."""
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    valid, bad = demo_topic(bootstrap, topic_name, 900, 0.05, partitions=2)
    newest_ms = max(m.timestamp()[1] for m in consume_all(bootstrap, topic_name, 2))
    job, table, url = f"{topic_name}-metrics", f"{topic_name}_metrics", stack_settings.offsets_db_url
    stop, failed = threading.Event(), []

    def launch() -> None:
        try:
            stream.run(stream.StreamArgs(job, topic_name, table, tmp_path / "ck", "500ms", 200, pipeline="orders"),
                       spark, {"bootstrap.servers": bootstrap}, url, stop)
        except Exception as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    def scraped() -> dict[tuple[str, tuple], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text_ = answer.read().decode()
        return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in ("topic", "partition")))): s.value
                for family in text_string_to_metric_families(text_) for s in family.samples
                if s.labels.get("streamfill_job") == job}

    runner = threading.Thread(target=launch)
    runner.start()
    try:
        deadline, seen = time.monotonic() + 240, {}
        while time.monotonic() < deadline and not failed:
            try:
                seen = scraped()
            except OSError:
                seen = {}
            if seen.get(("streamfill_rows_total", ())) == len(valid) and ("streamfill_freshness_seconds", ()) in seen:
                break
            time.sleep(0.5)
        assert not failed, failed
        (rows, dead, commits), = query(db, "SELECT sum(rows_written), sum(dead_letters), count(*) FROM batches b "
                                           "JOIN jobs j ON j.id = b.job_id WHERE j.name = :j AND "
                                           "b.committed_at IS NOT NULL", j=job)
        lag = {(("partition", str(p)), ("topic", t)): n
               for t, p, n in query(db, "SELECT topic, partition, lag FROM consumer_lag WHERE job = :j", j=job)}
        assert rows == len(valid) and dead == len(bad)
        assert seen.get(("streamfill_rows_total", ())) == rows, seen
        assert seen.get(("streamfill_dead_letters_total", ())) == dead
        assert seen.get(("streamfill_commits_total", ())) == commits == seen.get(
            ("streamfill_commit_duration_seconds_count", ()))
        assert {k[1]: v for k, v in seen.items() if k[0] == "streamfill_lag"} == lag
        assert seen[("streamfill_freshness_seconds", ())] == newest_ms / 1000
    finally:
        stop.set()
        runner.join(120)

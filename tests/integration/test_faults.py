"""Faults on purpose (docs/guarantees.md, issue "Faults and fencing"): concurrent launches of
one job, PostgreSQL crashed
between the tasks' COPY and the commit, a topic deleted and recreated, poison records. Every test ends with the
same check a user would make: per partition, rows + dead letters = offsets consumed, and nothing twice.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType
from sqlalchemy import create_engine, text

from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.spark import postgres_commit, postgres_plan, postgres_staging
from streamfill.errors import Fenced, JobBusy, OptionError, ProtocolError
from streamfill.offsets_db.pending_batch import COMMIT_LOCK_SPACE
from streamfill.offsets_db.store import OffsetStore
from tests.integration.test_exactly_once import DRIVER, REPO, _records, run_driver, run_in_session
from tests.kafka_helpers import create_topic, end_offsets, produce

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def assert_exactly_once(url: str, job: str, table: str, consumed: dict[int, int], history_pruned: bool = False) -> None:
    """Per partition: rows in the table + the job's dead letters = offsets its committed batches consumed =
    `consumed` (what the test produced), and no (partition, offset) twice. With the job's history pruned (no
    dead letters in its records), where the job stands (latest_offsets) stands for its committed batches."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = dict(conn.execute(text(f'SELECT partition, count(*) FROM "{table}" GROUP BY partition')).all())
            twice = conn.execute(text(f'SELECT count(*) FROM (SELECT partition, "offset" FROM "{table}" '
                                      'GROUP BY 1, 2 HAVING count(*) > 1) d')).scalar()
            dead = dict(conn.execute(text(
                "SELECT d.partition, count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                "WHERE j.name = :j GROUP BY d.partition"), {"j": job}).all())
            planned = dict(conn.execute(text(
                "SELECT partition, next_offset FROM latest_offsets WHERE job = :j" if history_pruned else
                "SELECT bo.partition, sum(bo.end_offset - bo.start_offset) FROM batch_offsets bo "
                "JOIN batches b ON b.id = bo.batch_id JOIN jobs j ON j.id = b.job_id "
                "WHERE j.name = :j AND b.committed_at IS NOT NULL GROUP BY bo.partition"), {"j": job}).all())
    finally:
        engine.dispose()
    landed = {p: rows.get(p, 0) + dead.get(p, 0) for p in consumed}
    assert twice == 0, f"{twice} (partition, offset) pairs landed twice"
    assert landed == consumed, f"rows + dead letters per partition {landed} != offsets consumed {consumed}"
    assert {p: int(planned.get(p, 0)) for p in consumed} == consumed, \
        f"committed batches cover {planned}, not exactly {consumed}"


def start_driver(topic: str, job: str, table: str, checkpoint: Path, env: dict | None = None,
                 max_per_trigger: int = 200) -> subprocess.Popen:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STREAMFILL_FAILPOINT")},
            "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([sys.executable, str(DRIVER), topic, job, table, str(checkpoint), str(max_per_trigger)],
                            env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def pause_at(fp: Path, point: str, at: int) -> dict:
    return {"STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_AT": str(at), "STREAMFILL_FAILPOINT_ACTION": "pause",
            "STREAMFILL_FAILPOINT_DIR": str(fp)}


def wait_for(path: Path, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the driver ended before {what}:\n{proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.2)


def per_partition(count: int, partitions: int = 4) -> dict[int, int]:
    return {p: len(range(p, count, partitions)) for p in range(partitions)}


# one launch per job

def test_two_streams_of_one_job_one_runs_the_other_is_refused_and_a_prune_under_way_and_a_kill_lose_nothing(
        spark, stack_settings, bootstrap, topic_name, tmp_path):
    """While the first launch waits between staging a batch and committing it, a second launch is refused, and a
    prune at ages of a millisecond (a dry run first) removes the job's older batches but not what it resumes from
    nor the batch in flight. The first launch is then killed; the next one, pruned all along, ends exactly once."""
    from streamfill.retention_ages import Retention
    from streamfill.spark_jobs.maintenance import prune

    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, _records(0, 1200))
    job, table, url = f"{topic_name}-two", f"{topic_name}_two", stack_settings.offsets_db_url
    at_once = Retention(**{kind: timedelta(milliseconds=1) for kind in Retention.kinds()})
    fp = tmp_path / "fp"
    first = start_driver(topic_name, job, table, tmp_path / "ck-a", pause_at(fp, "sink.staged", 3))
    try:
        wait_for(fp / "reached", first, "the first launch's third commit")
        second = subprocess.run([sys.executable, str(DRIVER), topic_name, job, table, str(tmp_path / "ck-b"), "200"],
                                env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                                timeout=300)
        assert second.returncode != 0, "a second launch of a held job must not run"
        assert f"job '{job}' is held by another launch" in second.stderr, second.stderr[-3000:]
        assert f"on host {socket.gethostname()}, pid" in second.stderr

        batches = _batches(url, job)
        assert [committed for _, committed in batches] == [True, True, False]
        prune(url, at_once, apply=False, jobs=[job], progress=lambda _: None)
        assert _batches(url, job) == batches, "a dry run removes nothing"
        prune(url, at_once, apply=True, jobs=[job], progress=lambda _: None)
        assert _batches(url, job) == batches[1:], "the newest commit and the batch in flight stay"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)

    stop, failures = threading.Event(), []

    def keep_pruning() -> None:
        while not stop.wait(0.3):
            try:
                prune(url, at_once, apply=True, jobs=[job], progress=lambda _: None)
            except Exception as exc:  # noqa: BLE001 - reported by the test below
                failures.append(exc)

    pruner = threading.Thread(target=keep_pruning)
    pruner.start()
    try:  # the next launch, in the run's SparkSession
        failed = run_in_session(spark, bootstrap, topic_name, job, table, tmp_path / "ck-a")
    finally:
        stop.set()
        pruner.join()
    assert failed is None, failed
    assert failures == []
    assert_exactly_once(url, job, table, per_partition(1200), history_pruned=True)


def _batches(url: str, job: str) -> list[tuple[int, bool]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT b.seq, b.committed_at IS NOT NULL FROM batches b JOIN jobs j ON j.id = b.job_id "
                "WHERE j.name = :j ORDER BY b.seq"), {"j": job})]
    finally:
        engine.dispose()


def _sink(table: str, job: str, generation: int | None, url: str, ends: dict[str, dict[str, int]] | None = None):
    """The sink's plan of one df.write (each chunk of a backfill is one, with a staging table of its own);
    `ends`: the endingOffsets option, the batch the commit takes."""
    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType()), StructField("v", StringType())])
    options = {"table": table, "job": job, "url": url, "keyColumns": "topic,partition,offset"}
    if generation is not None:
        options["jobGeneration"] = str(generation)
    if ends is not None:
        options["endingOffsets"] = json.dumps(ends)
    return postgres_plan.plan_write(options, schema, False, streaming=False)


def _rows(plan, topic: str, start: int, end: int, partition: int = 0):
    """What a task of one chunk does: it stages its rows and hands the driver their message."""
    batch = pa.record_batch({"topic": [topic] * (end - start),
                             "partition": pa.array([partition] * (end - start), pa.int32()),
                             "offset": pa.array(range(start, end), pa.int64()),
                             "v": [f"v{i}" for i in range(start, end)]})
    return postgres_staging.stage_write(plan, iter([batch]))


def _commit(plan, message) -> None:
    """What the driver does with a chunk's messages: commit, or abort on failure."""
    try:
        postgres_commit.commit(plan, [message], None)
    except BaseException:
        postgres_commit.abort(plan, [message])
        raise


def _write(plan, topic: str, start: int, end: int, partition: int = 0) -> None:
    """One chunk, staged and committed."""
    _commit(plan, _rows(plan, topic, start, end, partition))


def test_two_launches_interleaved_through_the_store_and_the_sink_cannot_lose_a_chunk(stack_settings, topic_name):
    """The interleaving measured in the issue, step by step and without Spark: launch A commits chunk 1 and
    plans chunk 2; launch B (same arguments) must neither take the job nor commit its chunk-1 rows as chunk 2."""
    url = stack_settings.offsets_db_url
    store = OffsetStore(url)
    job, table, topic = f"{topic_name}-il", f"{topic_name}_il", topic_name
    store.ensure_job(job, "backfill")
    a = store.hold(job)
    run_a = store.start_run(job, lease=a)
    store.record_planned(job, [OffsetRange(topic, 0, 0, 100)], generation=a.generation)
    _write(_sink(table, job, a.generation, url), topic, 0, 100)
    store.record_planned(job, [OffsetRange(topic, 0, 100, 200)], generation=a.generation)

    with pytest.raises(JobBusy, match=rf"held by another launch: run {run_a} on host {socket.gethostname()}, "
                                      rf"pid {os.getpid()}, for \d+s"):
        store.hold(job)
    with pytest.raises(JobBusy):
        store.record_planned(job, [OffsetRange(topic, 0, 0, 100)])  # planning without holding the job
    with pytest.raises(OptionError, match="jobGeneration"):
        _sink(table, job, None, url)  # a bounded write that does not hold the job cannot even start
    with pytest.raises(ProtocolError, match=r"offsets 0\.\.99 are not batch 2's \(it planned \[100, 200\)\)"):
        _write(_sink(table, job, a.generation, url), topic, 0, 100)  # chunk-1 rows offered as the pending chunk 2
    _write(_sink(table, job, a.generation, url), topic, 100, 200)
    assert store.snapshot(job) == {(topic, 0): 200}

    # A plans chunk 3 and loses its session (a crash of its lease connection); B takes the job over
    store.record_planned(job, [OffsetRange(topic, 0, 200, 300)], generation=a.generation)
    a.release()
    b = store.hold(job)
    assert b.generation == a.generation + 1
    with pytest.raises(Fenced, match=f"generation {a.generation}"):
        _write(_sink(table, job, a.generation, url), topic, 200, 300)  # A's late write of chunk 3
    store.record_planned(job, [OffsetRange(topic, 0, 200, 300)], generation=b.generation)  # B replans chunk 3
    _write(_sink(table, job, b.generation, url), topic, 200, 300)
    b.release()
    assert store.snapshot(job) == {(topic, 0): 300}
    assert_exactly_once(url, job, table, {0: 300})

    # a launch that waits (--wait-for-job, waitForJob) gets the job when the holder ends
    c = store.hold(job)
    threading.Timer(1.0, c.release).start()
    d = store.hold(job, wait_s=120)
    assert d.generation == c.generation + 1
    d.release()


def test_two_chunks_in_flight_each_commit_their_own_batch_in_either_order(stack_settings, topic_name):
    """The backfill's pipeline, step by step and without Spark: chunks 1 (partition 0) and 2 (partition 1) are
    both planned before either commits; each write names its ends, so each commit takes its own batch, the
    second one first. A write naming ends no batch has, or rows outside its batch, commits nothing."""
    url = stack_settings.offsets_db_url
    store = OffsetStore(url)
    job, table, topic = f"{topic_name}-fl", f"{topic_name}_fl", topic_name
    store.ensure_job(job, "backfill")
    lease = store.hold(job)
    try:
        store.record_planned(job, [OffsetRange(topic, 0, 0, 100)], generation=lease.generation)
        store.record_planned(job, [OffsetRange(topic, 1, 0, 80)], generation=lease.generation)
        one = _sink(table, job, lease.generation, url, {topic: {"0": 100}})
        two = _sink(table, job, lease.generation, url, {topic: {"1": 80}})
        staged_one = _rows(one, topic, 0, 100, partition=0)
        _write(two, topic, 0, 80, partition=1)  # the later chunk commits first
        assert store.snapshot(job) == {(topic, 1): 80}
        with pytest.raises(ProtocolError, match=rf"no planned batch ending at {topic}-0: 90"):
            _write(_sink(table, job, lease.generation, url, {topic: {"0": 90}}), topic, 0, 90)
        with pytest.raises(ProtocolError, match=r"offsets 0\.\.79 are not batch 1's"):
            _write(_sink(table, job, lease.generation, url, {topic: {"0": 100}}), topic, 0, 80, partition=1)
        _commit(one, staged_one)
        assert store.snapshot(job) == {(topic, 0): 100, (topic, 1): 80}
        _write(_sink(table, job, lease.generation, url, {topic: {"0": 100}}), topic, 0, 100)  # a replay: no change
        # two batches of one partition: the later one cannot commit before the one it follows
        store.record_planned(job, [OffsetRange(topic, 0, 100, 150)], generation=lease.generation)
        store.record_planned(job, [OffsetRange(topic, 0, 150, 200)], generation=lease.generation)
        with pytest.raises(ProtocolError, match=rf"batch 4 starts at {topic}-0: 150, but the job stands at "
                                                rf"{topic}-0: 100"):
            _write(_sink(table, job, lease.generation, url, {topic: {"0": 200}}), topic, 150, 200)
        _write(_sink(table, job, lease.generation, url, {topic: {"0": 150}}), topic, 100, 150)
        _write(_sink(table, job, lease.generation, url, {topic: {"0": 200}}), topic, 150, 200)
        # ends must name every partition of the batch, no more and no fewer
        store.record_planned(job, [OffsetRange(topic, 0, 200, 250), OffsetRange(topic, 1, 80, 130)],
                             generation=lease.generation)
        for partial in ({topic: {"0": 250}}, {topic: {"0": 250, "1": 130, "2": 10}}):
            with pytest.raises(ProtocolError, match="no planned batch ending at"):
                _write(_sink(table, job, lease.generation, url, partial), topic, 200, 250)
        both = _sink(table, job, lease.generation, url, {topic: {"0": 250, "1": 130}})
        staged = [_rows(both, topic, 200, 250, partition=0), _rows(both, topic, 80, 130, partition=1)]
        # while another commit of the job runs (holding its commit lock), this one waits, then commits
        engine = create_engine(url)
        other = engine.connect()
        job_id = other.execute(text("SELECT id FROM jobs WHERE name = :j"), {"j": job}).scalar_one()
        other.execute(text("SELECT pg_advisory_lock(:space, :job_id)"), {"space": COMMIT_LOCK_SPACE, "job_id": job_id})
        waiting = threading.Thread(target=postgres_commit.commit, args=(both, staged, None))
        waiting.start()
        deadline = time.monotonic() + 120
        while not other.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                     "AND classid = :space AND objid = :job_id"),
                                {"space": COMMIT_LOCK_SPACE, "job_id": job_id}).scalar():
            assert waiting.is_alive() and time.monotonic() < deadline, "the commit did not wait for the other one"
            time.sleep(0.05)
        assert store.snapshot(job) == {(topic, 0): 200, (topic, 1): 80}
        other.execute(text("SELECT pg_advisory_unlock(:space, :job_id)"),
                      {"space": COMMIT_LOCK_SPACE, "job_id": job_id})
        other.close()
        engine.dispose()
        waiting.join(timeout=120)
        assert store.snapshot(job) == {(topic, 0): 250, (topic, 1): 130}
        # a launch that died left a batch pending; the next launch plans the same range again and commits it
        store.record_planned(job, [OffsetRange(topic, 0, 250, 300)], generation=lease.generation)
        store.record_planned(job, [OffsetRange(topic, 1, 130, 180)], generation=lease.generation)
    finally:
        lease.release()
    again = store.hold(job)
    try:
        store.record_planned(job, [OffsetRange(topic, 0, 250, 300)], generation=again.generation)
        _write(_sink(table, job, again.generation, url, {topic: {"0": 300}}), topic, 250, 300)
    finally:
        again.release()
    with pytest.raises(OptionError, match="endingOffsets"):
        _sink(table, job, 1, url, {topic: {"0": -5}})
    assert store.snapshot(job) == {(topic, 0): 300, (topic, 1): 130}
    assert_exactly_once(url, job, table, {0: 300, 1: 130})


def test_a_copy_of_offsets_db_on_the_same_server_whose_launch_holds_the_same_job_holds_nothing_here(stack_settings):
    """Advisory and table locks belong to their database: a copy of offsets_db on the same server (CREATE
    DATABASE ... TEMPLATE: a staging or test install) has the same job ids and table oids, and its launch holding
    the job holds nothing here. Here the job's launch ended: a plan without a hold is not refused as busy, the
    sink's sweep sees that launch dead, and a wait for a table lock names none of the copy's sessions."""
    import psycopg2
    from sqlalchemy import make_url

    from bench.cleanup import scratch_database
    from streamfill.cli.stack.postgres import admin_url
    from streamfill.connectors.postgres.connection import dsn
    from streamfill.offsets_db.fencing import launch_alive
    from streamfill.offsets_db.locks import table_holders

    job, schema = "copied", stack_settings.db_schema
    with scratch_database(stack_settings, "fencing") as url:
        store = OffsetStore(url)
        store.ensure_job(job, "backfill")
        ended = store.hold(job)
        ended.release()
        store.engine.dispose()  # a template database takes no connection while it is copied
        original = make_url(url).database
        copy_url = make_url(url).set(database=f"{original}_copy").render_as_string(hide_password=False)
        admin = create_engine(admin_url(stack_settings), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{original}_copy" TEMPLATE "{original}"'))
        copy = OffsetStore(copy_url)
        try:
            held = copy.hold(job)  # the copy's launch of the job, alive
            reader = copy.engine.connect()  # a reader of the copy's jobs table
            reader.execute(text(f'SELECT count(*) FROM "{schema}".jobs'))
            reader_pid = reader.execute(text("SELECT pg_backend_pid()")).scalar()
            store.record_planned(job, [OffsetRange("t", 0, 0, 10)])  # planning without a hold, no launch alive
            conn = psycopg2.connect(dsn(url))
            try:
                with conn.cursor() as cur:
                    assert not launch_alive(cur, job, ended.generation), "the sweep keeps a dead launch's stage"
                    holders = table_holders(schema, "jobs", "ACCESS EXCLUSIVE")(cur)
                    assert not [h for h in holders if f"pid {reader_pid} " in h], holders
            finally:
                conn.close()
            reader.close()
            held.release()
        finally:
            copy.engine.dispose()
            store.engine.dispose()
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE "{original}_copy" WITH (FORCE)'))
            admin.dispose()


def _entry(tmp_path: Path, name: str, topic: str) -> Path:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""jobs:
  {name}:
    topic: {topic}
    format: json
    columns:
      id:   {{type: bigint, required: true}}
      note: {{type: string, max_length: 1000}}
    key: [id]
    table: {name}
""")
    return jobs


def _cli(args: list[str], jobs: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamfill.cli.main", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("STREAMFILL_FAILPOINT")},
                                 "STREAMFILL_JOBS_FILE": str(jobs), "COLUMNS": "250", **(env or {})})


def _backfill_of(tmp_path: Path, bootstrap: str, name: str, topic: str, partitions: int, records: int,
                 chunk_size: int) -> tuple[Path, list[str]]:
    """A topic of `records` JSON records spread over its partitions, its jobs file entry and backfill arguments."""
    jobs = _entry(tmp_path, name, topic)
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, [{"value": json.dumps({"id": i, "note": f"n{i}"}).encode(), "partition": i % partitions}
                               for i in range(records)])
    return jobs, ["backfill", "--job", name, "--from", "earliest", "--to", "latest", "--chunk-size", str(chunk_size)]


def test_the_same_backfill_started_twice_runs_once_the_second_is_refused_or_waits(stack_settings, bootstrap,
                                                                                   topic_name, tmp_path):
    name = f"twice_{topic_name}"
    jobs, args = _backfill_of(tmp_path, bootstrap, name, topic_name, 2, 2000, 500)
    fp = tmp_path / "fp"
    first = _cli(args, jobs, pause_at(fp, "sink.staged", 2))
    waiting = None
    try:
        wait_for(fp / "reached", first, "the first backfill's second chunk commit")
        refused = _cli(args, jobs)
        out, _ = refused.communicate(timeout=300)
        assert refused.returncode == 73, out[-3000:]  # held by another launch (docs/operations.md#exit-codes)
        assert "is held by another launch: run" in out and "--wait-for-job" in out, out[-3000:]
        waiting = _cli([*args, "--wait-for-job", "10m"], jobs)
        deadline = time.monotonic() + 300
        while "waiting for run" not in (waiting_out := _peek(waiting)):
            assert waiting.poll() is None, waiting_out[-3000:]
            assert time.monotonic() < deadline, "the waiting launch never said whom it waits for"
        (fp / "go").touch()
        out, _ = first.communicate(timeout=600)
        assert first.returncode == 0, out[-3000:]
        rest, _ = waiting.communicate(timeout=600)
        assert waiting.returncode == 0, (waiting_out + rest)[-3000:]
        assert "already complete" in waiting_out + rest, "the waiting launch found the work done"
    finally:
        for proc in (first, waiting):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    job = _backfill_job(stack_settings.offsets_db_url, name)
    assert_exactly_once(stack_settings.offsets_db_url, job, name, {0: 1000, 1: 1000})


def test_a_chunk_that_fails_beside_another_fails_the_run_and_the_rerun_lands_each_offset_once(
        stack_settings, bootstrap, topic_name, tmp_path):
    """Two chunks in flight: the second commit's Python worker dies. The launch fails (exit code 1, its run
    recorded failed) whatever the other chunk did; the re-run resumes and every offset lands once."""
    from tests.lineage_receiver import receiver

    name = f"fail_{topic_name}"
    jobs, args = _backfill_of(tmp_path, bootstrap, name, topic_name, 3, 3000, 400)
    dies = {"STREAMFILL_FAILPOINT": "sink.staged", "STREAMFILL_FAILPOINT_AT": "2",
            "STREAMFILL_FAILPOINT_ACTION": "exit", "STREAMFILL_FAILPOINT_DIR": str(tmp_path / "fp")}
    with receiver() as lineage:
        out, _ = _cli(args, jobs, {**dies, **lineage.env}).communicate(timeout=600)
        assert "Committed chunks stay committed" in out, out[-3000:]
        url = stack_settings.offsets_db_url
        job = _backfill_job(url, name)
        again = _cli(args, jobs, lineage.env)
        rest, _ = again.communicate(timeout=600)
        assert again.returncode == 0 and "(resuming)" in rest, rest[-3000:]
    # lineage: the failed launch says so with its cause, the re-run is a run of its own that completes
    assert lineage.invalid == []
    ours = [e for e in lineage.events if e["job"]["name"] == job]
    assert [e["eventType"] for e in ours] == ["START", "FAIL", "START", "COMPLETE"]
    assert ours[0]["run"]["runId"] == ours[1]["run"]["runId"] != ours[2]["run"]["runId"]
    assert "errorMessage" in ours[1]["run"]["facets"] and ours[1]["run"]["facets"]["errorMessage"]["message"]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            runs = conn.execute(text("SELECT r.status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j "
                                     "ORDER BY r.id"), {"j": job}).scalars().all()
    finally:
        engine.dispose()
    assert runs == ["failed", "succeeded"], runs
    assert_exactly_once(url, job, name, {0: 1000, 1: 1000, 2: 1000})


_peeked: dict[int, str] = {}


def _peek(proc: subprocess.Popen) -> str:
    """What a running process has printed so far (one line at a time, without blocking past a line)."""
    line = proc.stdout.readline()
    _peeked[proc.pid] = _peeked.get(proc.pid, "") + line
    return _peeked[proc.pid]


def _backfill_job(url: str, entry: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT name FROM jobs WHERE name LIKE :p"), {"p": f"{entry}.backfill.%"}).scalar_one()
    finally:
        engine.dispose()


# offsets that go backwards

def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([topic], operation_timeout=30).values():
        fut.result(60)
    deadline = time.monotonic() + 120
    while True:
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except Exception:  # noqa: BLE001 - the deletion is still in progress
            assert time.monotonic() < deadline, "the topic could not be recreated"
            time.sleep(0.5)


def test_a_topic_deleted_and_recreated_is_data_loss_failing_or_recorded_by_failOnDataLoss(
        spark, stack_settings, bootstrap, topic_name, tmp_path, db):
    """The launches run in the run's SparkSession (stream_driver.py's query, run_in_session)."""
    url = stack_settings.offsets_db_url
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": f'{{"n": {i}}}'.encode(), "partition": 0} for i in range(2300)])
    job, table, checkpoint = f"{topic_name}-re", f"{topic_name}_re", tmp_path / "checkpoint"
    assert run_in_session(spark, bootstrap, topic_name, job, table, checkpoint, 1000) is None
    _recreate(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": f'{{"n": {10_000 + i}}}'.encode(), "partition": 0} for i in range(1300)])
    assert end_offsets(bootstrap, topic_name) == {0: 1300}

    failed = run_in_session(spark, bootstrap, topic_name, job, table, checkpoint, 1000)
    assert failed is not None, "failOnDataLoss=true: the stream must fail"
    assert f"data loss on {topic_name}-0: the log now ends at offset 1300, below the position 2300" in failed, \
        failed[-3000:]
    with db.connect() as conn:
        events = conn.execute(text("SELECT e.kind, e.lost_from, e.lost_to FROM data_loss_events e JOIN jobs j "
                                   "ON j.id = e.job_id WHERE j.name = :j"), {"j": job}).all()
    assert ("offset_went_back", 1300, 2300) in events, "the failure is recorded for the job"

    assert run_in_session(spark, bootstrap, topic_name, job, table, tmp_path / "ck2", 1000,
                          source_options={"failOnDataLoss": "false"}) is None
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar()
        recorded = conn.execute(text(
            "SELECT count(*) FROM data_loss_events e JOIN jobs j ON j.id = e.job_id WHERE j.name = :j AND "
            "e.kind = 'offset_went_back' AND e.batch_id IS NOT NULL"), {"j": job}).scalar()
        snapshot = conn.execute(text("SELECT next_offset FROM snapshots s JOIN jobs j ON j.id = s.job_id "
                                     "WHERE j.name = :j"), {"j": job}).scalar()
        planned = conn.execute(text(
            "SELECT sum(bo.end_offset - bo.start_offset) FROM batch_offsets bo JOIN batches b ON b.id = bo.batch_id "
            "JOIN jobs j ON j.id = b.job_id WHERE j.name = :j AND b.committed_at IS NOT NULL"), {"j": job}).scalar()
        twice = conn.execute(text(f'SELECT count(*) - count(DISTINCT (partition, "offset", value)) FROM "{table}"')
                             ).scalar()
    engine.dispose()
    assert recorded == 1, "failOnDataLoss=false: the event is recorded with the batch that read the new log"
    assert snapshot == 1300
    # the two logs share offsets 0..1299, so a row is told apart by its offset and its value
    assert rows == planned == 2300 + 1300, "the old log's 2,300 rows and the whole new log, nothing skipped"
    assert twice == 0, "nothing twice"


# poison records

def test_poison_records_in_the_middle_of_a_stream_become_dead_letters_and_the_stream_goes_on(
        stack_settings, bootstrap, topic_name, tmp_path):
    """A NUL in a string (PostgreSQL's COPY refuses it), bytes that are not UTF-8, a value far over its
    column's limit: each becomes a dead letter with its reason; every record around them lands."""
    name = f"poison_{topic_name}"
    jobs = _entry(tmp_path, name, topic_name)
    create_topic(bootstrap, topic_name, 2)
    good = lambda i: {"value": json.dumps({"id": i, "note": f"n{i}"}).encode(), "partition": i % 2}  # noqa: E731  one line the test reads at a glance
    produce(bootstrap, topic_name, [good(i) for i in range(300)])
    produce(bootstrap, topic_name, [
        {"value": json.dumps({"id": 1000, "note": "a\u0000b"}).encode(), "partition": 0},
        {"value": b'{"id": 1001, "note": "\xff\xfe"}', "partition": 1},
        {"value": json.dumps({"id": 1002, "note": "x" * 900_000}).encode(), "partition": 0},
        {"value": b"\x00\x01 not json", "partition": 1}])
    produce(bootstrap, topic_name, [good(i) for i in range(300, 600)])
    done = subprocess.run([sys.executable, "-m", "streamfill.cli.main", "stream", "--job", name, "--trigger", "available-now",
                           "--checkpoint", str(tmp_path / "ck")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "STREAMFILL_JOBS_FILE": str(jobs), "COLUMNS": "250"}, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    url = stack_settings.offsets_db_url
    engine = create_engine(url)
    with engine.connect() as conn:
        reasons = dict(conn.execute(text("SELECT d.\"offset\" + 1000 * d.partition, d.error FROM dead_letters d "
                                         "JOIN jobs j ON j.id = d.job_id WHERE j.name = :j"), {"j": name}).all())
    engine.dispose()
    assert len(reasons) == 4, reasons
    assert any("NUL" in r for r in reasons.values()), reasons
    assert any("UTF-8" in r for r in reasons.values()), reasons
    assert any("note" in r and "1000" in r for r in reasons.values()), reasons
    assert_exactly_once(url, name, name, {0: 302, 1: 302})


# the broker

def test_the_broker_stopped_mid_batch_and_restarted_ends_exactly_once(private_kafka, stack_settings, topic_name,
                                                                      tmp_path):
    """The batch is planned, the broker goes away before its tasks read, and comes back: the tasks wait for it
    (or the batch fails and the rerun replays it); either way every record lands once."""
    bootstrap = private_kafka.settings.bootstrap_servers
    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, _records(0, 1200))
    job, table, checkpoint = f"{topic_name}-broker", f"{topic_name}_broker", tmp_path / "checkpoint"
    fp = tmp_path / "fp"
    env = {"STREAMFILL_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
           "DRIVER_SOURCE_OPTIONS": json.dumps({"kafkaConsumer.pollTimeoutMs": "90000"})}
    driver = start_driver(topic_name, job, table, checkpoint, {**env, **pause_at(fp, "source.planned", 2)})
    try:
        wait_for(fp / "reached", driver, "the second batch's plan")
        private_kafka.stop()
        (fp / "go").touch()  # the tasks start reading from a broker that is down
        private_kafka.start()
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    if driver.returncode != 0:  # the batch gave up on the broker: the rerun replays it
        done = run_driver(topic_name, job, table, checkpoint, env)
        assert done.returncode == 0, done.stderr[-3000:]
    assert_exactly_once(stack_settings.offsets_db_url, job, table, per_partition(1200))

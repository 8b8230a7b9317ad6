"""The DAGs on real Airflow: integrity, `airflow dags test` runs of the interval, replay and quality DAGs,
quality failures, Airflow's own backfill, a replay through the REST API and a stream restarted by Airflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from streamfill import dag_ids
from streamfill.cli.stack.airflow import airflow_bin, airflow_env, reserialize
from streamfill.orchestration.airflow_api import AirflowApi, AirflowError
from streamfill.spark_jobs.demo import events
from streamfill.spark_jobs.demo.produce import ensure_topic
from tests.airflow_helpers import left_to_dags_test, replay_form_offers
from tests.job_helpers import orders_columns
from tests.kafka_helpers import end_offsets
from tests.kafka_helpers import produce as produce_records
from tests.shared_run import AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


ORDERS_COLUMNS = orders_columns(12)


@pytest.fixture
def jobs_file(tmp_path, topic_name) -> Path:
    """A jobs file of its own: DAGs for one test topic, nothing shared with the stack's `orders`."""
    path = tmp_path / "jobs.yaml"
    path.write_text(textwrap.dedent(f"""\
        jobs:
          {topic_name}:
            topic: {topic_name}
            table: {topic_name}_events
            trigger: 2s
            interval_table: {topic_name}_hourly
{ORDERS_COLUMNS}    """))
    return path


def airflow(settings, *args: str, jobs: Path | None = None, timeout: float = 600,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**airflow_env(settings), **(env_extra or {})}
    if jobs is not None:
        env["STREAMFILL_JOBS_FILE"] = str(jobs)
    return subprocess.run([airflow_bin(), *args], env=env, capture_output=True, text=True, timeout=timeout)


def timed_events(bootstrap: str, topic: str, stamps: list[int], bad_every: int = 10, seed: int = 3,
                 partitions: int = 2) -> list:
    """One demo event per timestamp (ms) into partitions 0 and 1, every bad_every-th one bad; returns
    (value, is_bad, ts) as sent."""
    ensure_topic(bootstrap, topic, partitions)
    now = datetime.now(timezone.utc)
    sent = []
    for i, (_, value, _) in enumerate(events.records(len(stamps), 0.0, seed, now=now)):
        bad = bad_every and i % bad_every == bad_every - 1
        sent.append((b"{broken" if bad else value, bool(bad), stamps[i]))
    produce_records(bootstrap, topic, [{"value": v, "partition": i % 2, "timestamp": ts}
                                       for i, (v, _, ts) in enumerate(sent)])
    return sent


def test_every_dag_imports_and_the_replay_form_rejects_bad_input(stack_settings):
    script = textwrap.dedent("""
        import copy, json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")  # bagging checks each DAG for cycles: one would be an import error
        out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
               "tags": sorted({t for d in bag.dags.values() for t in d.tags}),
               "tasks": {d.dag_id: len(d.tasks) for d in bag.dags.values()}, "rejected": {}}
        replay = bag.dags["streamfill_replay"]
        for name, bad in {"mode": {"mode": "upsert"}, "job": {"job": "nope"}, "from": {"from": "yesterday"},
                          "table": {"table": "x; drop"}, "chunk": {"chunk_size": 0}}.items():
            params = copy.deepcopy(replay.params)
            try:
                for k, v in bad.items():
                    params[k] = v
                params.validate()
                out["rejected"][name] = None
            except Exception as exc:
                out["rejected"][name] = type(exc).__name__
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], env=airflow_env(stack_settings), capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["errors"] == {} and out["tags"] == ["streamfill"]
    assert out["tasks"][dag_ids.REPLAY] == 3 and out["tasks"][dag_ids.interval("orders")] == 3
    assert out["dags"] == ["streamfill_announce__orders", "streamfill_demo_revenue", "streamfill_interval__orders",
                           "streamfill_maintenance", "streamfill_quality__orders", "streamfill_replay",
                           "streamfill_stream__orders", "streamfill_stream_health__orders"]
    assert out["rejected"] == {k: "ParamValidationError" for k in ("mode", "job", "from", "table", "chunk")}


def test_an_interval_run_reads_exactly_its_window_checks_it_and_says_so_as_an_asset_event_and_in_lineage(
        stack_settings, bootstrap, db, topic_name, jobs_file):
    from streamfill.datasets import PgTable
    from streamfill.offsets_db.announce_plan import from_extra
    from streamfill.orchestration.airflow_api import AirflowApi
    from tests.lineage_receiver import receiver

    start = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    ms = int(start.timestamp() * 1000)
    # before the window, in it, after it (record timestamps, not arrival order, decide)
    stamps = [ms - 60_000 + i for i in range(40)] + [ms + i * 9_000 for i in range(400)] + \
             [ms + 3_600_000 + i for i in range(40)]
    sent = timed_events(bootstrap, topic_name, stamps)
    # a manual run at L covers the last whole interval before L: [start, start + 1 h)
    run_at = (start + timedelta(hours=1)).isoformat()
    dag = dag_ids.interval(topic_name)
    with receiver() as lineage:
        done = airflow(stack_settings, "dags", "test", dag, run_at, jobs=jobs_file, env_extra=lineage.env)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        table = f"{topic_name}_hourly"
        in_window = [(v, bad) for v, bad, ts in sent if ms <= ts < ms + 3_600_000]
        assert query(db, f'SELECT count(*) FROM "{table}"') == [(sum(not b for _, b in in_window),)]
        want = {json.loads(v)["event_id"] for v, bad in in_window if not bad}
        assert {r[0] for r in query(db, f'SELECT event_id FROM "{table}"')} == want
        job = f"{topic_name}.interval.{start:%Y%m%dT%H%M}"
        bad = sum(b for _, b in in_window)
        assert query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                     j=job) == [(bad,)]
        assert query(db, "SELECT success, table_name FROM quality_results q JOIN jobs j ON j.id = q.job_id "
                         "WHERE j.name = :j", j=job) == [(True, table)]
        # the same window again: replace rewrites the same rows, nothing more
        again = airflow(stack_settings, "dags", "test", dag, run_at, jobs=jobs_file, env_extra=lineage.env)
        assert again.returncode == 0, again.stdout[-3000:]
        assert {r[0] for r in query(db, f'SELECT event_id FROM "{table}"')} == want
        assert query(db, f'SELECT count(*) FROM "{table}"') == [(len(want),)]

    # one asset event of the windows' table per run, keyed by the window's start; the second marked a re-run
    api = AirflowApi(stack_settings)
    asset = api.asset_id(PgTable.of(stack_settings.offsets_db_url, table).asset_uri)
    bodies = [(e["partition_key"], from_extra(e["extra"])) for e in api.asset_events(asset)]
    assert [(key, b["pass"], b["rerun"], b["rows"], b["dead_letters"], b["window"]["start"]) for key, b in bodies] == [
        (f"{start:%Y-%m-%dT%H:%M:%S}", n, n > 1, len(want), bad, start.isoformat()) for n in (1, 2)]
    offsets = {p: sum(e - s for s, e in spans) for p, spans in bodies[0][1]["offsets"][topic_name].items()}
    assert sum(offsets.values()) == len(in_window)

    # lineage: each backfill and each quality check a run, under the Airflow task that launched it
    assert lineage.invalid == []
    runs = [e for e in lineage.events if e["job"]["name"] == job]
    checks = [e for e in lineage.events if e["job"]["name"] == f"{job}.quality"]
    assert [e["eventType"] for e in runs] == ["START", "COMPLETE"] * 2
    assert [e["eventType"] for e in checks] == ["START", "COMPLETE"] * 2
    first = runs[0]
    assert first["run"]["facets"]["parent"]["job"]["name"] == f"{dag}.backfill_window"
    assert first["run"]["facets"]["parent"]["root"]["job"]["name"] == dag
    # the tasks reach Kafka on its SASL_SSL listener
    assert [(i["namespace"], i["name"]) for i in first["inputs"]] == [
        (f"kafka://{stack_settings.kafka_secured_servers.split(',')[0]}", topic_name)]
    assert [o["name"] for o in first["outputs"]] == [f"{stack_settings.db_name}.public.{table}"]
    assert {f["name"] for f in first["outputs"][0]["facets"]["schema"]["fields"]} >= {"event_id", "topic", "offset"}
    assertions = checks[1]["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert assertions and all(a["success"] for a in assertions)


def test_a_bad_replay_is_refused_before_spark_and_a_rule_breaking_row_fails_the_quality_dag(
        spark, stack_settings, bootstrap, db, topic_name, jobs_file, tmp_path):
    """A replay whose from is after its to is refused by its validation task; the stream's table with a
    duplicate and an out-of-range row fails its scheduled quality DAG, each rule named. (A replay that lands
    its rows and passes its suite: the dropped pipeline's test below and test_airflow_ui.)"""
    import threading

    from streamfill.spark_jobs import stream
    from streamfill.spark_jobs.demo.produce import produce

    ensure_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 1200, bad_ratio=0.05, seed=21)
    with left_to_dags_test(stack_settings, dag_ids.REPLAY):
        bad = airflow(stack_settings, "dags", "test", dag_ids.REPLAY, "-c",
                      json.dumps({"job": topic_name, "from": '{"0": 300}', "to": '{"0": 200}'}), jobs=jobs_file)
    assert bad.returncode != 0 and "start offset 300 > end offset 200" in bad.stdout + bad.stderr, \
        (bad.stdout + bad.stderr)[-8000:]
    assert query(db, "SELECT count(*) FROM jobs WHERE name LIKE :j", j=f"{topic_name}.replay.%") == [(0,)]

    # the stream's table, then its scheduled quality DAG, which fails on rows that break rules (the suite
    # passing is the replay's quality task above)
    stream.run(stream.StreamArgs(topic_name, topic_name, f"{topic_name}_events", tmp_path / "ckpt",
                                 "available-now", None, pipeline="orders"), spark, {"bootstrap.servers": bootstrap},
               stack_settings.offsets_db_url,
               threading.Event())
    events_table = f"{topic_name}_events"
    with db.begin() as conn:
        # rows that exist whichever partitions the keyless bad records went to: the first and the last
        first_row = f'(SELECT partition, "offset" FROM "{events_table}" ORDER BY 1, 2 LIMIT 1)'
        last_row = f'(SELECT partition, "offset" FROM "{events_table}" ORDER BY 1 DESC, 2 DESC LIMIT 1)'
        assert conn.execute(text(f'UPDATE "{events_table}" SET amount = -5 '
                                 f'WHERE (partition, "offset") = {first_row}')).rowcount == 1
        assert conn.execute(text(f'INSERT INTO "{events_table}" SELECT topic, partition, "offset" + 1000000, '
                                 f'kafka_timestamp, event_id, user_id, event_type, amount, currency, event_time '
                                 f'FROM "{events_table}" WHERE (partition, "offset") = {last_row}')).rowcount == 1
    failed = airflow(stack_settings, "dags", "test", dag_ids.quality(topic_name), jobs=jobs_file)
    assert failed.returncode != 0
    log = failed.stdout + failed.stderr
    assert "FAIL expect_column_values_to_be_unique(column=event_id" in log, log[-6000:]
    assert "FAIL expect_column_values_to_be_between(column=amount" in log, log[-6000:]
    stored = query(db, "SELECT success, result FROM quality_results q JOIN jobs j ON j.id = q.job_id "
                       "WHERE j.name = :j ORDER BY q.id", j=topic_name)
    assert [s for s, _ in stored] == [False]
    failing = [(e["expectation_type"], e["kwargs"].get("column")) for e in stored[0][1]["expectations"]
               if not e["success"]]
    assert sorted(failing) == [("expect_column_values_to_be_between", "amount"),
                               ("expect_column_values_to_be_unique", "event_id")]


@pytest.fixture(scope="module")
def api(stack_settings) -> AirflowApi:
    """The running standalone, with the DAGs parsed now rather than at its next folder scan, and the replay
    form offering the stack's own `orders` again."""
    airflow_api = AirflowApi(stack_settings)
    replay_form_offers(airflow_api, stack_settings, "orders")
    return airflow_api


def test_a_replay_conf_through_the_rest_api_is_checked_before_anything_runs(api, bootstrap, db, topic_name):
    """A bad value is refused by the Params schema, a key that is no field of the form fails the run's first
    task. (A replay triggered through the REST API lands its rows in the dropped pipeline's test below, one
    triggered from the form in test_airflow_ui.)"""
    ensure_topic(bootstrap, "orders", 4)
    after = end_offsets(bootstrap, "orders")
    table = f"{topic_name}_rest"
    conf = {"job": "orders", "from": json.dumps({str(p): 0 for p in after}),
            "to": json.dumps({str(p): o for p, o in after.items()}), "mode": "append-new", "table": table}
    # a bad conf is refused by the Params schema with the parameter named
    with pytest.raises(AirflowError, match=r"HTTP 400 .*mode"):
        api.trigger(dag_ids.REPLAY, {**conf, "mode": "upsert"})
    # a key that is no field of the form (Airflow accepts any) fails the run's first task, before Spark
    typo = {k: v for k, v in conf.items() if k != "from"} | {"form": conf["from"]}
    run_id = api.trigger(dag_ids.REPLAY, typo)
    assert api.wait(dag_ids.REPLAY, run_id) == "failed"
    run = urllib.parse.quote(run_id)
    states = {t["task_id"]: t["state"] for t in api.call(
        "GET", f"/api/v2/dags/{dag_ids.REPLAY}/dagRuns/{run}/taskInstances")["task_instances"]}
    assert states == {"validate_replay": "failed", "run_replay": "upstream_failed", "quality": "upstream_failed"}
    log = json.dumps(api.call("GET", f"/api/v2/dags/{dag_ids.REPLAY}/dagRuns/{run}/taskInstances/validate_replay/"
                                     "logs/1?full_content=true"))
    assert "is not a field of streamfill_replay's form" in log and "did you mean 'from'?" in log, log[-3000:]
    assert query(db, "SELECT to_regclass(:t) IS NULL", t=table) == [(True,)]


@contextmanager
def dropped_file(stack_settings, name: str, body: str):
    """A file in dags/jobs.d/, the way a user adds a pipeline, parsed at once; removed again at the end."""
    from streamfill import REPO_ROOT

    path = REPO_ROOT / "dags" / "jobs.d" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body))
    reserialize(stack_settings)
    try:
        yield name
    finally:
        path.unlink()
        reserialize(stack_settings)


@pytest.fixture
def dropped_job(stack_settings, topic_name):
    """A job of this test's own, shaped like the demo's orders."""
    with dropped_file(stack_settings, topic_name, f"""\
        jobs:
          {topic_name}:
            topic: {topic_name}
            table: {topic_name}_events
            interval_table: {topic_name}_hourly
{ORDERS_COLUMNS}    """) as name:
        yield name


def test_airflow_backfill_reprocesses_exactly_its_windows(api, stack_settings, bootstrap, db, dropped_job):
    """Airflow's own backfill of two hours: a run per window, the windows' rows exactly. A window run again
    rewrites the same rows (the interval test's second run)."""
    topic, dag = dropped_job, dag_ids.interval(dropped_job)
    first = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)
    ms, hour = int(first.timestamp() * 1000), 3_600_000  # records from first - 1 h to first + 4 h
    # timestamps in order, from an hour before the first window to well after the second
    sent = timed_events(bootstrap, topic, [ms - hour + i * 60_000 for i in range(300)])

    api.set_paused(dag, False)
    try:
        done = airflow(stack_settings, "backfill", "create", "--dag-id", dag, "--from-date", first.isoformat(),
                       "--to-date", (first + timedelta(hours=1)).isoformat(), "--reprocess-behavior", "none")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:  # Airflow marks a backfill completed when its runs have ended
            backfills = api.call("GET", f"/api/v2/backfills?dag_id={dag}")["backfills"]
            if len(backfills) == 1 and backfills[0]["completed_at"]:
                break
            time.sleep(1)
        runs = api.call("GET", f"/api/v2/dags/{dag}/dagRuns?run_type=backfill&limit=100")["dag_runs"]
        assert [r["state"] for r in runs] == ["success"] * 2, runs
        windows = sorted((datetime.fromisoformat(r["data_interval_start"]),
                          datetime.fromisoformat(r["data_interval_end"])) for r in runs)
        # two consecutive hours around --from-date/--to-date (Airflow decides how dates map to intervals)
        assert [e - b for b, e in windows] == [timedelta(hours=1)] * 2
        assert windows[0][1] == windows[1][0]
        assert first - timedelta(hours=1) <= windows[0][0] <= first + timedelta(hours=1)
        rows = query(db, f'SELECT event_id, partition, "offset", amount FROM "{topic}_hourly"')
        lo, hi = (int(w.timestamp() * 1000) for w in (windows[0][0], windows[1][1]))
        want = {json.loads(v)["event_id"] for v, bad, ts in sent if not bad and lo <= ts < hi}
        assert {r[0] for r in rows} == want and len(rows) == len(want)
    finally:
        api.set_paused(dag, True)


def _spark_submit_of(job: str) -> tuple[int, int] | None:
    """(pid of the spark-submit JVM running stream.py for `job`, pid of the Airflow task process that started
    it), or None while there is none."""
    found = subprocess.run(["pgrep", "-f", f"SparkSubmit.*spark_jobs/stream.py --job {job} "], capture_output=True,
                           text=True).stdout.split()
    for pid in map(int, found):
        try:
            return pid, int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return None


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists()
            and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


@pytest.mark.fault
def test_the_stream_task_stopped_like_airflow_stops_it_commits_its_batch_in_flight_and_the_retry_starts_after_it(
        api, bootstrap, db, stack_settings):
    """Airflow's task supervisor stops a task with SIGTERM and, 5 s later, SIGKILL. The stream's Spark job
    outlives its task to commit the batch in flight within its stop grace, then ends; the retry waits for it and
    starts exactly where it ended, exactly once. The stack's Airflow reaches Kafka on its SASL_SSL listener with the
    connection's credentials only: no argv or log shows them."""
    from streamfill.spark_jobs.demo.produce import produce

    ensure_topic(bootstrap, "orders", 4)
    produce(bootstrap, "orders", 100_000, bad_ratio=0.01, seed=int(time.time()))  # a batch of seconds
    end = end_offsets(bootstrap, "orders")
    dag = dag_ids.stream("orders")
    before = query(db, "SELECT coalesce(max(b.id), 0) FROM batches b JOIN jobs j ON j.id = b.job_id "
                       "WHERE j.name = 'orders'")[0][0]
    run_id = api.trigger(dag, {"trigger": "available-now"})
    deadline = time.monotonic() + 600
    launch = None
    while launch is None:
        # stop the task while its launch has a batch in flight: planned, not committed
        assert time.monotonic() < deadline, "the stream never started"
        flying = query(db, "SELECT b.id, b.run_id FROM batches b JOIN jobs j ON j.id = b.job_id JOIN runs r ON "
                           "r.id = b.run_id WHERE j.name = 'orders' AND b.id > :before AND b.committed_at IS NULL "
                           "AND r.airflow_run_id = :r AND r.status = 'running'", before=before, r=run_id)
        launch = _spark_submit_of("orders") if flying else None
        time.sleep(0.1)
    (inflight, first_run), = flying
    jvm, task = launch
    group = [int(p) for p in subprocess.run(["pgrep", "-g", str(os.getpgid(jvm))], capture_output=True,
                                            text=True).stdout.split()]
    password = stack_settings.kafka_password_file.read_text().strip()
    assert "STREAMFILL_KAFKA_SASL_PASSWORD" not in os.environ  # the connection is where the launch got it
    for pid in group:
        assert password not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    os.kill(task, signal.SIGTERM)  # what Airflow's supervisor does, then SIGKILL 5 s later
    gone = time.monotonic() + 5
    while _alive([task]) and time.monotonic() < gone:
        time.sleep(0.1)
    if _alive([task]):
        os.kill(task, signal.SIGKILL)
    left = time.monotonic() + 60 + 30  # the entry's stop grace, and the JVM's own exit
    while _alive(group) and time.monotonic() < left:
        time.sleep(0.2)
    assert not _alive(group), f"processes of the stopped task's Spark job still run: {_alive(group)}"
    assert query(db, "SELECT committed_at IS NOT NULL, run_id FROM batches WHERE id = :b", b=inflight) == [
        (True, first_run)], "the batch in flight at the stop committed, by the stopped launch"
    assert api.wait(dag, run_id) == "success"
    tis = api.call("GET", f"/api/v2/dags/{dag}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances")
    task_instance = tis["task_instances"][0]
    assert task_instance["try_number"] >= 2  # Airflow's retry restarted it
    log = json.dumps(api.call("GET", f"/api/v2/dags/{dag}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/"
                                     f"{task_instance['task_id']}/logs/{task_instance['try_number']}"
                                     "?full_content=true"))
    listener = f"Kafka: bootstrap servers {stack_settings.kafka_secured_servers} (SASL_SSL, SASL mechanism "
    assert listener in log, log[-3000:]
    assert password not in log
    statuses = [r[0] for r in query(db, "SELECT r.status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE "
                                        "j.name = 'orders' AND r.airflow_run_id = :r ORDER BY r.id", r=run_id)]
    assert statuses[0] == "stopped" and statuses[-1] == "succeeded", statuses  # the stopped launch, the retry
    ends = dict(query(db, "SELECT partition, end_offset FROM batch_offsets WHERE batch_id = :b", b=inflight))
    after = query(db, "SELECT min(b.id) FROM batches b JOIN runs r ON r.id = b.run_id WHERE r.airflow_run_id = :r "
                      "AND b.run_id <> :first", r=run_id, first=first_run)[0][0]
    if after is not None:  # the retry had offsets left to read: it started exactly where the stop ended
        starts = dict(query(db, "SELECT partition, start_offset FROM batch_offsets WHERE batch_id = :b", b=after))
        assert {p: o for p, o in starts.items() if p in ends} == {p: o for p, o in ends.items() if p in starts}
    latest = dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = 'orders' "
                            "AND topic = 'orders'"))
    assert latest == end
    for p, e in end.items():
        rows = query(db, 'SELECT count(*) FROM orders_events WHERE topic = \'orders\' AND partition = :p '
                         'AND "offset" < :e', p=p, e=e)[0][0]
        dead = query(db, 'SELECT count(DISTINCT "offset") FROM dead_letters WHERE topic = \'orders\' '
                         'AND partition = :p AND "offset" < :e', p=p, e=e)[0][0]
        assert rows + dead == e, f"partition {p}: {rows} rows + {dead} dead letters != {e} offsets"


@pytest.fixture
def sensors_job(stack_settings, topic_name):
    """A pipeline of another shape than the demo's, added by dropping one file in dags/jobs.d/."""
    with dropped_file(stack_settings, topic_name, f"""\
        jobs:
          {topic_name}:
            topic: {topic_name}
            columns:
              sensor:  {{type: string, required: true, pattern: "^s[0-9]+$"}}
              reading: {{type: double, required: true, min: -50, max: 150}}
              place:   {{type: "struct<site:string,floor:int>"}}
            table: {topic_name}_readings
            quality:
              - expect_column_values_to_not_be_null: {{column: place}}
    """) as name:
        yield name


def test_a_dropped_pipeline_gets_dags_its_replay_passes_its_suite_and_a_broken_rule_fails_it(api, bootstrap, db,
                                                                                              stack_settings,
                                                                                              sensors_job):
    topic = sensors_job
    ensure_topic(bootstrap, topic, 2)
    records = [{"sensor": f"s{i}", "reading": i * 1.5, "place": {"site": "north", "floor": i % 3}} for i in range(40)]
    records[5] = {"sensor": "x5", "reading": 1.0, "place": {"site": "n", "floor": 1}}  # breaks the pattern
    produce_records(bootstrap, topic, [{"value": json.dumps(r).encode(), "partition": i % 2}
                                       for i, r in enumerate(records)])
    for dag in (dag_ids.stream(topic), dag_ids.interval(topic), dag_ids.quality(topic)):
        assert api.call("GET", f"/api/v2/dags/{dag}")["dag_id"] == dag
    replay_form_offers(api, stack_settings, topic)
    table = f"{topic}_replayed"
    # partition 0 from its offset 3 (partition 1, not named, from its earliest), in chunks of 10 offsets
    conf = {"job": topic, "from": '{"0": 3}', "to": "latest", "mode": "append-new", "table": table,
            "chunk_size": 10}
    run_id = api.trigger(dag_ids.REPLAY, conf)
    assert api.wait(dag_ids.REPLAY, run_id, timeout=900) == "success"
    landed = {tuple(r) for r in query(db, f'SELECT partition, "offset" FROM "{table}" WHERE place IS NOT NULL')}
    assert landed == {(0, o) for o in range(3, 20)} | {(1, o) for o in range(20) if o != 2}  # x5: offset 2 of 1
    replay_job = query(db, "SELECT name FROM jobs WHERE name LIKE :j", j=f"{topic}.replay.%")[0][0]
    assert query(db, "SELECT error FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                 j=replay_job) == [("sensor does not match pattern ^s[0-9]+$: x5",)]
    with db.begin() as conn:  # a rule broken on purpose: the replay's suite, cleared in Airflow, must now fail
        conn.execute(text(f'UPDATE "{table}" SET reading = 999 WHERE sensor = \'s7\''))
    api.call("POST", f"/api/v2/dags/{dag_ids.REPLAY}/clearTaskInstances",
             {"dag_run_id": run_id, "task_ids": ["quality"], "only_failed": False, "dry_run": False})
    assert api.wait(dag_ids.REPLAY, run_id, timeout=900) == "failed"
    stored = query(db, "SELECT success, result FROM quality_results q JOIN jobs j ON j.id = q.job_id "
                       "WHERE j.name = :j ORDER BY q.id", j=replay_job)
    assert [s for s, _ in stored] == [True, False]
    failing = [(e["expectation_type"], e["kwargs"].get("column")) for e in stored[1][1]["expectations"]
               if not e["success"]]
    assert failing == [("expect_column_values_to_be_between", "reading")]


@pytest.fixture
def second_database(stack_settings, topic_name):
    """A second PostgreSQL connection: a database of its own on the stack's server, offsets_db migrated there, as
    the Airflow connection `<topic>_b` (AIRFLOW_CONN_*); dropped at the end."""
    from sqlalchemy import create_engine, make_url

    from streamfill.cli.stack.postgres import admin_url
    from streamfill.offsets_db.migrate import upgrade
    from streamfill.orchestration.connections import postgres_connection

    name = f"{topic_name}_b"
    admin = create_engine(admin_url(stack_settings), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER "{stack_settings.db_user}"'))
    url = make_url(stack_settings.offsets_db_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url, pool_pre_ping=True)
    try:
        upgrade(url)
        yield name, url, engine, {f"AIRFLOW_CONN_{name.upper()}": json.dumps(postgres_connection(url))}
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


BY_HAND_DAG = '''\
"""A DAG of a team's own (airflow DAG), from streamfill's operators: per entry, a range backfilled into a table, then
a sensor until the backfill's commits cover the offsets produced, then the entry's quality suite."""
from airflow.sdk import DAG

from streamfill.orchestration.backfill_operator import StreamfillBackfillOperator
from streamfill.orchestration.committed_through_sensor import CommittedThroughSensor
from streamfill.orchestration.quality_operator import StreamfillQualityOperator

# paused: the stack's scheduler would otherwise queue the test run's tasks to its own workers too
with DAG("{dag_id}", schedule=None, catchup=False, is_paused_upon_creation=True):
    for entry, postgres, produced in {entries!r}:
        filled = StreamfillBackfillOperator(task_id=f"backfill_{{entry}}", entry=entry, from_="earliest",
                                            to="latest", table=f"{{entry}}_by_hand")
        through = CommittedThroughSensor(task_id=f"committed_{{entry}}", job=filled.output, offsets=produced,
                                         postgres_conn_id=postgres, poke_interval=1)
        checked = StreamfillQualityOperator(task_id=f"quality_{{entry}}", entry=entry, job=filled.output,
                                            table=f"{{entry}}_by_hand")
        filled >> through >> checked
'''


def test_a_dag_written_by_hand_backfills_waits_for_the_commits_and_checks_quality_on_two_databases(
        stack_settings, bootstrap, db, topic_name, second_database, tmp_path):
    """Two entries of one topic, one on the default PostgreSQL connection and one naming another
    (`postgres_conn_id` in its entry): each entry's rows, offsets_db history and quality verdict land in its own
    database, exactly once. The DAG file sits in the DAG folder for the test's length, as a team's would."""
    from streamfill import REPO_ROOT
    from streamfill.orchestration.offsets_hook import StreamfillOffsetsHook
    from streamfill.spark_jobs.backfill_args import backfill_job

    second, second_url, second_db, conn_env = second_database
    a, b = f"{topic_name}_a", f"{topic_name}_b"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(textwrap.dedent(f"""\
        jobs:
          {a}:
            topic: {topic_name}
            table: {a}_events
{ORDERS_COLUMNS}          {b}:
            topic: {topic_name}
            table: {b}_events
            postgres_conn_id: {second}
{ORDERS_COLUMNS}    """))
    sent = timed_events(bootstrap, topic_name, [int(time.time() * 1000) - 60_000 + i for i in range(40)])
    ends = end_offsets(bootstrap, topic_name)
    last = {topic_name: {str(p): o - 1 for p, o in ends.items()}}
    dag_id = f"by_hand_{topic_name}"
    dag_file = REPO_ROOT / "dags" / f"{dag_id}.py"
    dag_file.write_text(BY_HAND_DAG.format(dag_id=dag_id, entries=[(a, "streamfill_postgres", last),
                                                                   (b, second, last)]))
    try:
        done = airflow(stack_settings, "dags", "test", dag_id, "-f", str(dag_file), jobs=jobs, env_extra=conn_env)
    finally:
        dag_file.unlink()
        try:
            AirflowApi(stack_settings).call("DELETE", f"/api/v2/dags/{dag_id}")
        except Exception:  # noqa: BLE001 - a DAG Airflow never recorded
            pass
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert out.count("[DAG TEST] running trigger in line") == 2, out[-6000:]  # the sensors deferred

    good = {json.loads(v)["event_id"] for v, bad, _ in sent if not bad}
    for entry, engine, url in ((a, db, stack_settings.offsets_db_url), (b, second_db, second_url)):
        other = second_db if engine is db else db
        table, job = f"{entry}_by_hand", backfill_job(entry, "earliest", "latest", f"{entry}_by_hand")
        assert {r[0] for r in query(engine, f'SELECT event_id FROM "{table}"')} == good
        assert query(other, "SELECT to_regclass(:t) IS NULL", t=table) == [(True,)]  # nothing in the other database
        assert query(other, "SELECT count(*) FROM jobs WHERE name = :j", j=job) == [(0,)]
        assert query(engine, "SELECT q.success, q.table_name FROM quality_results q JOIN jobs j ON j.id = q.job_id "
                             "WHERE j.name = :j", j=job) == [(True, table)]
        for p, end in ends.items():  # exactly once: rows + dead letters = offsets, per partition
            rows = query(engine, f'SELECT count(*) FROM "{table}" WHERE partition = :p', p=p)[0][0]
            dead = query(engine, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                 "WHERE j.name = :j AND d.partition = :p", j=job, p=p)[0][0]
            assert rows + dead == end, f"{entry} partition {p}: {rows} rows + {dead} dead letters != {end} offsets"

        # what a team's own task asks the hook: the job's position, lag, dead letters and history
        hook = StreamfillOffsetsHook(url=url)
        try:
            assert hook.position(job) == {(topic_name, p): o for p, o in ends.items()}
            assert set(hook.lag(job).values()) <= {0}
            assert hook.dead_letter_count(job) == sum(bad for _, bad, _ in sent)
            assert {(d["partition"], d["offset"], d["raw_value"]) for d in hook.dead_letters(job)} == set(query(
                engine, 'SELECT d.partition, d."offset", d.raw_value FROM dead_letters d JOIN jobs j ON '
                        "j.id = d.job_id WHERE j.name = :j", j=job))
            history = hook.history(job)
            assert history and sum(r["offsets"] for r in history) == sum(ends.values())
            assert hook.last_commit(job) is not None
        finally:
            hook.close()


def test_a_launch_refused_by_its_job_fails_the_airflow_task_without_a_retry(stack_settings):
    """spark-submit carries the job's exit code: a launch refused for bad input (here: an entry the jobs file does
    not have) ends with bad input's code, 2, which the task raises as AirflowFailException."""
    from airflow.sdk.exceptions import AirflowFailException

    from streamfill.orchestration.endpoints import Endpoints
    from streamfill.orchestration.spark_submit import spark_submit
    from streamfill.spark_jobs.backfill_args import BackfillArgs
    from streamfill.spark_jobs.job_flags import argv

    ends = Endpoints(stack_settings.offsets_db_url, {"bootstrap.servers": stack_settings.bootstrap_servers},
                     "local[1]")
    with pytest.raises(AirflowFailException, match=r"backfill.py refused to run \(exit code 2\)"):
        spark_submit("backfill.py", argv(BackfillArgs, job="refused_job", topic="t", from_="earliest", to="latest",
                                         pipeline="no_such_entry"), ends)


def test_a_broken_entry_is_one_import_error_while_the_other_entries_dags_stay_scheduled(api, stack_settings,
                                                                                        topic_name):
    """Issue 55's "a broken entry shows as one import error while the other entries' DAGs run": a jobs.d file with
    a sound entry and one whose cron has a field missing, parsed by the stack's Airflow. Airflow takes every DAG of
    a file with an import error off the schedule (stale, has_import_errors): the sound entry's DAGs and the stack's
    own stay what its scheduler runs, and the one import error names the broken entry, its field, value and fix."""
    broken = f"{topic_name}_typo"
    with dropped_file(stack_settings, topic_name, f"""\
        jobs:
          {topic_name}:
            topic: {topic_name}
            table: {topic_name}_events
{ORDERS_COLUMNS}
          {broken}:
            topic: {broken}
            table: {broken}_events
            schedule: "0 * * *"
{ORDERS_COLUMNS}    """):
        errors = api.call("GET", "/api/v2/importErrors?limit=100")["import_errors"]
        assert [e["filename"] for e in errors if broken in e["stack_trace"]] == ["streamfill_broken_entries.py"], \
            errors
        (said,) = [e["stack_trace"] for e in errors if broken in e["stack_trace"]]
        assert f"job '{broken}': schedule = '0 * * *': is not a cron schedule Airflow accepts" in said, said
        assert "use five fields (minute hour day-of-month month day-of-week)" in said, said
        assert not [e for e in errors if e["filename"] == "streamfill_dags.py"], errors
        for dag in (*dag_ids.of_entry(topic_name, True), dag_ids.REPLAY, dag_ids.stream("orders")):
            found = api.call("GET", f"/api/v2/dags/{dag}")  # what the scheduler asks before it runs a DAG
            assert (found["is_stale"], found["has_import_errors"]) == (False, False), found
        with pytest.raises(urllib.error.HTTPError) as missing:
            api.call("GET", f"/api/v2/dags/{dag_ids.stream(broken)}")
        assert missing.value.code == 404
    assert not [e for e in api.call("GET", "/api/v2/importErrors?limit=100")["import_errors"]
                if broken in e["stack_trace"]]


def _task_processes(run_id: str) -> list[int]:
    """Processes working for an Airflow run's task (a task's process exports AIRFLOW_CTX_DAG_RUN_ID)."""
    mine = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"AIRFLOW_CTX_DAG_RUN_ID={run_id}".encode() in (proc / "environ").read_bytes():
                    mine.append(int(proc.name))
            except OSError:
                continue
    return mine


@pytest.mark.fault
def test_a_stream_on_spark_connect_runs_apart_from_its_task_which_defers_and_restarts_it_after_a_kill(
        api, bootstrap, db, stack_settings, topic_name):
    """An entry whose Spark connection is the stack's Spark Connect server: the stream's driver runs there, the
    task defers to its supervision on the triggerer (no worker slot, no task process) while the stream commits;
    the query killed, the supervision starts it again within a minute and it goes on where offsets_db says,
    each record once; stopped on request, its batch in flight commits and the task ends."""
    job = topic_name
    body = f"""\
        jobs:
          {job}:
            topic: {topic_name}
            columns:
              id: {{type: string, required: true}}
              n:  {{type: int, min: 0}}
            table: {topic_name}
            trigger: 1s
            spark_conn_id: streamfill_spark_connect
        """
    ensure_topic(bootstrap, topic_name, 2)

    def send(start: int, end: int) -> None:
        produce_records(bootstrap, topic_name, [
            {"value": json.dumps({"id": f"r{i}", "n": -1 if i % 25 == 0 else i}).encode(), "partition": i % 2}
            for i in range(start, end)])

    def landed(total: int) -> bool:
        rows = query(db, f'SELECT count(*) FROM "{topic_name}"')[0][0]
        dead = query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                     j=job)[0][0]
        return rows + dead >= total

    def wait(what, timeout: float, message: str):
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, message
            time.sleep(1)

    # the dropped file is a jobs.d file of the checkout's jobs file: the command finds the entry there
    stop = [str(Path(sys.executable).parent / "streamfill"), "stream", "--job", job, "--stop"]
    send(0, 400)
    with dropped_file(stack_settings, job, body):
        dag = dag_ids.stream(job)
        api.set_paused(dag, False)
        try:
            run_id = api.trigger(dag, {})
            ti = f"/api/v2/dags/{dag}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances"
            wait(lambda: api.call("GET", ti)["task_instances"][0]["state"] == "deferred", 300,
                 "the stream task never deferred to its supervision")
            wait(lambda: landed(400), 180, "the detached stream did not land the first records")
            assert _task_processes(run_id) == [], "no Airflow process works for the deferred task"
            first = query(db, "SELECT r.id, l.pid FROM runs r JOIN jobs j ON j.id = r.job_id JOIN job_leases l ON "
                              "l.job_id = j.id WHERE j.name = :j AND r.airflow_run_id = :r ORDER BY r.id DESC "
                              "LIMIT 1", j=job, r=run_id)[0]
            send(400, 600)
            wait(lambda: landed(600), 120, "the detached stream stopped committing while its task was deferred")

            os.kill(first[1], signal.SIGKILL)  # the query's source on the Spark Connect server: the query fails
            killed = time.monotonic()
            wait(lambda: query(db, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = :j "
                                   "AND r.airflow_run_id = :r AND r.id > :first", j=job, r=run_id,
                               first=first[0])[0][0] > 0, 240, "the supervision never started the stream again")
            send(600, 1000)
            wait(lambda: landed(1000), 180, "the restarted stream did not go on")
            restarted_in = query(db, "SELECT min(r.started_at) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE "
                                     "j.name = :j AND r.id > :first", j=job, first=first[0])[0][0]
            assert api.call("GET", ti)["task_instances"][0]["state"] == "deferred"
            assert restarted_in is not None and time.monotonic() - killed < 240
            stopped = subprocess.run(stop, capture_output=True, text=True)
            assert f"stream {job}: stopped" in stopped.stdout, stopped.stdout + stopped.stderr
            assert api.wait(dag, run_id, timeout=180) == "success", "a stream stopped on request ends its task"
        finally:
            subprocess.run(stop, capture_output=True)  # whatever failed above, no query is left running
            api.set_paused(dag, True)
    ends = dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j", j=job))
    rows = dict(query(db, f'SELECT partition, count(*) FROM "{topic_name}" GROUP BY 1'))
    dead = dict(query(db, "SELECT d.partition, count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE "
                          "j.name = :j GROUP BY 1", j=job))
    twice = query(db, f'SELECT count(*) FROM (SELECT partition, "offset" FROM "{topic_name}" GROUP BY 1, 2 HAVING '
                      "count(*) > 1) AS d")[0][0]
    assert ends == {0: 500, 1: 500} and twice == 0
    assert {p: rows.get(p, 0) + dead.get(p, 0) for p in ends} == ends, "rows + dead letters = offsets, per partition"

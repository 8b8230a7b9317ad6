"""A stream's commits announced to Airflow as asset events: killed between any two steps of a delivery, the
announcer neither loses nor repeats an announcement, and the events Airflow stored cover the committed offsets
without gap or overlap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import uuid

import pytest

from offsets_db import announcements
from offsets_db.announce_plan import cover_problems, from_extra
from offsets_db.exactly_once import PlannedRange
from offsets_db.store import OffsetStore
from orchestration import dag_ids
from orchestration.airflow_api import AirflowApi
from streamfill import REPO_ROOT
from streamfill.datasets import PgTable
from tests.lineage_receiver import receiver
from tests.shared_run import AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]


def _commit(store: OffsetStore, job: str, n: int, run: int | None = None) -> None:
    """n more commits of 10 offsets on each of two partitions, by the launch `run`."""
    for _ in range(n):
        at = store.snapshot(job)
        ranges = [PlannedRange("events", p, at.get(("events", p), 0), at.get(("events", p), 0) + 10)
                  for p in (0, 1)]
        store.commit(job, store.record_planned(job, ranges, run_id=run), rows_written=19, dead_letters=1)


def _announcer(job: str, uri: str, tmp, point: str | None = None, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "STREAMFILL_FAILPOINT_DIR": str(tmp / (point or "clean"))}
    if point:
        env |= {"STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_ACTION": "kill"}
    return subprocess.run([sys.executable, "-m", "tests.integration.announce_driver", job, uri, "1"], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)


@pytest.mark.fault
def test_an_announcer_killed_before_and_after_it_posts_announces_every_commit_once(stack_settings, topic_name,
                                                                                    tmp_path):
    job = topic_name
    uri = PgTable.of(stack_settings.offsets_db_url, f"{topic_name}_events").asset_uri
    dag_file = REPO_ROOT / "dags" / f"{topic_name}_asset.py"  # declares the asset, paused: no watcher of its own
    dag_file.write_text("from airflow.sdk import DAG, Asset\n"
                        f"with DAG({dag_ids.announce(job)!r}, schedule=[Asset(name={uri!r}, uri={uri!r})], "
                        "is_paused_upon_creation=True):\n    pass\n")
    api = AirflowApi(stack_settings)
    try:
        deadline = time.monotonic() + 240
        while (asset := api.asset_id(uri)) is None:  # the DAG processor's next folder scan
            assert time.monotonic() < deadline, f"Airflow never listed the asset {uri}"
            time.sleep(2)
        store = OffsetStore(stack_settings.offsets_db_url)
        store.ensure_job(job, "stream")
        lineage_run = str(uuid.uuid4())
        run = store.start_run(job, lineage_run_id=lineage_run)
        _commit(store, job, 5, run)
        killed = [_announcer(job, uri, tmp_path, point) for point in ("announce.attempting", "announce.posted")]
        assert [k.returncode for k in killed] == [-9, -9], [k.stderr[-2000:] for k in killed]
        _commit(store, job, 3, run)
        with receiver() as lineage:
            done = _announcer(job, uri, tmp_path, env=lineage.env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "found in Airflow after an interrupted delivery" in done.stderr, done.stderr[-3000:]

        events = [e for e in api.asset_events(asset) if from_extra(e["extra"])]
        bodies = [from_extra(e["extra"]) for e in events]
        committed = announcements.commits(store.engine, job)
        assert len(committed) == 8
        assert cover_problems(committed, bodies) == []
        assert [e["partition_key"] for e in events] == [f"commits:{b['announcement']}" for b in bodies]
        assert len({b["uuid"] for b in bodies}) == len(events) == len(announcements.announced(store.engine, job)) >= 2
        assert sum(b["rows"] for b in bodies) == 8 * 19 and sum(b["dead_letters"] for b in bodies) == 8
        # lineage: a RUNNING event of the stream's run per announcement, with the rows it announced
        assert lineage.invalid == []
        assert [(e["eventType"], e["run"]["runId"], e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"])
                for e in lineage.events] == [("RUNNING", lineage_run, b["rows"]) for b in bodies]
    finally:
        dag_file.unlink(missing_ok=True)
        try:
            api.call("DELETE", f"/api/v2/dags/{dag_ids.announce(job)}")
        except urllib.error.HTTPError:
            pass


def _downstream_dag(name: str, uri: str) -> str:
    """A DAG a team would write on the stream's table: one run per announcement, each noting its key in
    <name>_seen (no unique key: a second run for one announcement would show as a second row)."""
    return f'''
from airflow.sdk import DAG, Asset, IdentityMapper, PartitionedAssetTimetable, get_current_context, task

with DAG("streamfill_downstream__{name}", catchup=False, tags=["streamfill"],
         schedule=PartitionedAssetTimetable(assets=Asset(name={uri!r}, uri={uri!r}),
                                            default_partition_mapper=IdentityMapper())):
    @task
    def seen():
        from sqlalchemy import create_engine, text
        from orchestration.tasks import endpoints
        engine = create_engine(endpoints().db_url)
        with engine.begin() as conn:
            conn.execute(text('CREATE TABLE IF NOT EXISTS "{name}_seen" (key text, run_id text)'))
            conn.execute(text('INSERT INTO "{name}_seen" VALUES (:k, :r)'),
                         {{"k": get_current_context()["dag_run"].partition_key,
                          "r": get_current_context()["dag_run"].run_id}})
        engine.dispose()
    seen()
'''


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(2)
    return found


def _kill_tree(pid: int) -> None:
    from app.stack.process import children

    for child in children(pid):
        _kill_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.whole_stack
@pytest.mark.fault
def test_commits_announced_through_kills_of_the_stream_and_the_triggerer_run_a_downstream_dag_once_each(
        stack_settings, bootstrap, db, topic_name):
    """A stream launched by Airflow, its announcer in Airflow's triggerer and a DAG downstream of its table: the
    stream's job is SIGKILLed (Airflow's retry resumes it), then the triggerer (commits go on, announcements
    stop; `stack up` restarts Airflow and the backlog goes out as one announcement). Announced ranges equal
    committed ranges, and the downstream DAG ran once per announcement."""
    from app.stack import up
    from app.stack.airflow import Airflow, reserialize
    from app.stack.process import children
    from spark_jobs.demo.produce import produce
    from tests.integration.test_airflow import ORDERS_COLUMNS, _spark_submit_of, dropped_file, query
    from tests.kafka_helpers import create_topic, end_offsets

    name, url = topic_name, stack_settings.offsets_db_url
    uri = PgTable.of(url, f"{name}_events").asset_uri
    create_topic(bootstrap, name, 4)
    produce(bootstrap, name, 3000, bad_ratio=0.02, seed=1)
    downstream = REPO_ROOT / "dags" / f"{name}_downstream.py"
    downstream.write_text(_downstream_dag(name, uri))
    api = AirflowApi(stack_settings)
    store = OffsetStore(url)
    stream_dag = dag_ids.stream(name)
    try:
        entry = f"""\
        jobs:
          {name}:
            topic: {name}
            table: {name}_events
            trigger: 2s
            max_offsets_per_trigger: 400
            announce_every: 3s
{ORDERS_COLUMNS}    """
        with dropped_file(stack_settings, name, entry):
            run_id = api.trigger(stream_dag, {})
            _wait(lambda: announcements.delivered_count(store.engine, name) >= 1, 300, "a first announcement")
            jvm = _wait(lambda: _spark_submit_of(name), 60, "the stream's spark-submit")[0]
            os.killpg(os.getpgid(jvm), signal.SIGKILL)  # Airflow's retry resumes the stream
            produce(bootstrap, name, 3000, bad_ratio=0.02, seed=2)

            airflow = Airflow(stack_settings)
            triggerer = next(p for p in children(airflow.pid()) if "triggerer" in " ".join(_argv(p)))
            _kill_tree(triggerer)
            stalled = len(announcements.announced(store.engine, name))
            commits_then = _commits(store, name)
            _wait(lambda: _commits(store, name) >= commits_then + 3, 300, "commits after the triggerer's death")
            produce(bootstrap, name, 3000, bad_ratio=0.02, seed=3)
            end = end_offsets(bootstrap, name)
            _wait(lambda: dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j",
                                     j=name)) == end, 600, "the stream caught up")
            assert len(announcements.announced(store.engine, name)) <= stalled + 1, "announced without a triggerer"
            api.call("PATCH", f"/api/v2/dags/{stream_dag}/dagRuns/{urllib.parse.quote(run_id)}",
                     {"state": "success"})  # the task is stopped; the stream ends between batches

            up(stack_settings)  # Airflow without its triggerer is restarted; the backlog is announced
            api = AirflowApi(stack_settings)
            total = _commits(store, name)
            _wait(lambda: (a := announcements.announced(store.engine, name)) and a[-1]["commits"][1]
                  == total, 300, "every commit announced after the restart")
            bodies = announcements.announced(store.engine, name)
            keys = [f"commits:{b['announcement']}" for b in bodies]
            _wait(lambda: sorted(r[0] for r in query(db, f'SELECT key FROM "{name}_seen"')) == sorted(keys), 300,
                  "one downstream run per announcement")

        committed = announcements.commits(store.engine, name)
        asset = api.asset_id(uri)
        events = [from_extra(e["extra"]) for e in api.asset_events(asset) if from_extra(e["extra"])]
        assert cover_problems(committed, events) == []
        assert [e["uuid"] for e in events] == [b["uuid"] for b in bodies]
        seen = query(db, f'SELECT key, count(*) FROM "{name}_seen" GROUP BY key')
        assert sorted(seen) == sorted((k, 1) for k in keys)
        for partition, offsets in end.items():
            rows = query(db, f'SELECT count(*) FROM "{name}_events" WHERE partition = :p', p=partition)[0][0]
            dead = query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j "
                             "AND d.partition = :p", j=name, p=partition)[0][0]
            assert rows + dead == offsets, f"partition {partition}: {rows} rows + {dead} dead letters != {offsets}"
        print(f"{len(committed)} commits, {len(bodies)} announcements, 2 kills: announced = committed")
    finally:
        downstream.unlink(missing_ok=True)
        reserialize(stack_settings)
        for dag_id in (f"streamfill_downstream__{name}",):
            try:
                api.call("DELETE", f"/api/v2/dags/{dag_id}")
            except urllib.error.HTTPError:
                pass


def _argv(pid: int) -> list[str]:
    from app.stack.pidfile import cmdline

    return cmdline(pid)


def _commits(store: OffsetStore, job: str) -> int:
    found = announcements.commits(store.engine, job)
    return found[-1].number if found else 0



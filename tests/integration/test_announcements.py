"""A stream's commits announced to Airflow as asset events: killed between any two steps of a delivery, the
announcer neither loses nor repeats an announcement, and the events Airflow stored cover the committed offsets
without gap or overlap; so for every job of a table several jobs write, through a lost lock and a send whose
answer never came."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import suppress
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, text

from streamfill import REPO_ROOT
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.datasets import PgTable
from streamfill.offsets_db import announcements
from streamfill.offsets_db.announce_plan import asset_cover_problems, commits_key, cover_problems, from_extra
from streamfill.offsets_db.store import OffsetStore
from streamfill.orchestration import assets, dag_ids
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.orchestration.announce import Announcer
from tests.lineage_receiver import receiver
from tests.shared_run import AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]


def _commit(store: OffsetStore, job: str, n: int, run: int | None = None) -> None:
    """n more commits of 10 offsets on each of two partitions, by the launch `run`."""
    for _ in range(n):
        at = store.snapshot(job)
        ranges = [OffsetRange("events", p, at.get(("events", p), 0), at.get(("events", p), 0) + 10)
                  for p in (0, 1)]
        store.commit(job, store.record_planned(job, ranges, run_id=run), rows_written=19, dead_letters=1)


def _announcer(job: str, uri: str, tmp, point: str | None = None, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "STREAMFILL_FAILPOINT_DIR": str(tmp / (point or "clean"))}
    if point:
        env |= {"STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_ACTION": "kill"}
    # a send that left without an answer is sent again after 1 s (the announcer's own wait is minutes)
    return subprocess.run([sys.executable, "-m", "tests.integration.announce_driver", job, uri, "1", "1"], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)


@pytest.fixture(scope="module")
def shared_table(stack_settings):
    """Two entries of the jobs folder writing one table, and a team's DAG downstream of the table (one run per
    partition key, nothing to execute), as Airflow parsed them; the table has no rows: commits are recorded in
    offsets_db directly."""
    from tests import conftest

    name = f"t_{uuid.uuid4().hex[:10]}"
    conftest.ISSUED.append(name)
    jobs, table, downstream_dag = (f"{name}_a", f"{name}_b"), f"{name}_events", f"streamfill_downstream__{name}"
    entries = REPO_ROOT / "dags" / "jobs.d" / f"{name}.yaml"
    entries.parent.mkdir(exist_ok=True)
    entries.write_text("jobs:\n" + "".join(f"  {job}:\n    topic: {name}\n    table: {table}\n    announce_every: 1s\n"
                                           "    columns: {id: {type: string}}\n" for job in jobs))
    dag_file = REPO_ROOT / "dags" / f"{name}_downstream.py"
    dag_file.write_text(textwrap.dedent(f"""\
        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG, IdentityMapper, PartitionedAssetTimetable
        from streamfill.orchestration import downstream

        with DAG({downstream_dag!r}, catchup=False, tags=["streamfill"],
                 schedule=PartitionedAssetTimetable(assets=downstream.stream_asset({jobs[0]!r}),
                                                    default_partition_mapper=IdentityMapper())):
            EmptyOperator(task_id="report")
        """))
    api = AirflowApi(stack_settings)
    uri = PgTable.of(stack_settings.offsets_db_url, table).asset_uri
    try:
        _parsed(stack_settings)
        asset = _wait(lambda: api.asset_id(uri), 60, f"Airflow lists the asset {uri}")
        yield SimpleNamespace(name=name, jobs=jobs, table=table, uri=uri, asset=asset, downstream_dag=downstream_dag,
                              store=OffsetStore(stack_settings.offsets_db_url))
    finally:
        entries.unlink(missing_ok=True)
        dag_file.unlink(missing_ok=True)
        _parsed(stack_settings)
        for dag_id in [downstream_dag, *(d for job in jobs for d in dag_ids.of_entry(job, True))]:
            with suppress(urllib.error.HTTPError):
                api.call("DELETE", f"/api/v2/dags/{dag_id}")


def _parsed(stack_settings) -> None:
    """The DAG folder parsed now. Airflow's DAG processor may be storing a new file's DAGs at the same moment, and
    one of the two then fails on a duplicate key: the other has stored them, and a second parse finds them."""
    from streamfill.cli.stack.airflow import reserialize
    from streamfill.errors import AirflowError

    for attempt in range(3):
        try:
            return reserialize(stack_settings)
        except AirflowError:
            if attempt == 2:
                raise


def _events(api: AirflowApi, asset: int) -> list[dict]:
    """The asset's events. Airflow 3.3.2 answers 500 while a run an event created is queued (its start_date is
    null, which the answer's model refuses: apache/airflow#71360), so it is asked until the runs have started."""
    def listed() -> tuple[list[dict]] | None:
        try:
            return (api.asset_events(asset),)
        except urllib.error.HTTPError as exc:
            if exc.code != 500:
                raise
            return None

    return _wait(listed, 60, f"Airflow lists the events of asset {asset}")[0]


def _caught_up(store: OffsetStore, job: str) -> bool:
    done = announcements.announced(store.engine, job)
    return announcements.pending(store.engine, job) is None and bool(done) and \
        done[-1]["commits"][1] == _commits(store, job)


def _as_triggerer_runs(trigger, until, timeout: float) -> None:
    """The watcher's trigger run as Airflow's triggerer runs it (an async generator on its event loop) until
    `until()`, then cancelled as the triggerer cancels a watcher."""
    async def triggerer() -> None:
        running = asyncio.ensure_future(anext(trigger.run()))
        deadline = time.monotonic() + timeout
        while not until():
            if running.done():
                running.result()
            assert time.monotonic() < deadline, f"not within {timeout:.0f} s: the announcements"
            await asyncio.sleep(0.5)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(triggerer())


@pytest.mark.fault
def test_an_announcer_killed_before_and_after_it_posts_announces_every_commit_once(stack_settings, shared_table,
                                                                                    tmp_path):
    t, api = shared_table, AirflowApi(stack_settings)
    job, store = f"{t.name}_killed", t.store  # a job of its own on the table's asset
    store.ensure_job(job, "stream")
    lineage_run = str(uuid.uuid4())
    run = store.start_run(job, lineage_run_id=lineage_run)
    _commit(store, job, 5, run)
    killed = [_announcer(job, t.uri, tmp_path, point) for point in ("announce.attempting", "announce.posted")]
    assert [k.returncode for k in killed] == [-9, -9], [k.stderr[-2000:] for k in killed]
    _commit(store, job, 3, run)
    with receiver() as lineage:
        done = _announcer(job, t.uri, tmp_path, env=lineage.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "found in Airflow after an interrupted delivery" in done.stderr, done.stderr[-3000:]

    events = [e for e in _events(api, t.asset) if (from_extra(e["extra"]) or {}).get("job") == job]
    bodies = [from_extra(e["extra"]) for e in events]
    committed = announcements.commits(store.engine, job)
    assert len(committed) == 8
    assert cover_problems(committed, bodies) == []
    assert [e["partition_key"] for e in events] == [commits_key(job, b["announcement"]) for b in bodies]
    assert len({b["uuid"] for b in bodies}) == len(events) == len(announcements.announced(store.engine, job)) >= 2
    assert sum(b["rows"] for b in bodies) == 8 * 19 and sum(b["dead_letters"] for b in bodies) == 8
    # lineage: a RUNNING event of the stream's run per announcement, with the rows it announced
    assert lineage.invalid == []
    assert [(e["eventType"], e["run"]["runId"], e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"])
            for e in lineage.events] == [("RUNNING", lineage_run, b["rows"]) for b in bodies]


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
        from streamfill.orchestration.endpoints import endpoints
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
    from streamfill.cli.stack.process import children

    for child in children(pid):
        _kill_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.fault
def test_commits_announced_through_kills_of_the_stream_and_the_triggerer_run_a_downstream_dag_once_each(
        stack_settings, bootstrap, db, topic_name):
    """A stream launched by Airflow, its announcer in Airflow's triggerer and a DAG downstream of its table: the
    stream's job is SIGKILLed (Airflow's retry resumes it), then the triggerer (commits go on, announcements
    stop; `stack up` restarts Airflow and the backlog goes out as one announcement). Announced ranges equal
    committed ranges, and the downstream DAG ran once per announcement."""
    from streamfill.cli.stack import up
    from streamfill.cli.stack.airflow import Airflow, reserialize
    from streamfill.cli.stack.process import children
    from streamfill.spark_jobs.demo.produce import produce
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
            max_offsets_per_trigger: 1000
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
            keys = [commits_key(name, b["announcement"]) for b in bodies]
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
    from streamfill.cli.stack.pidfile import cmdline

    return cmdline(pid)


def _commits(store: OffsetStore, job: str) -> int:
    found = announcements.commits(store.engine, job)
    return found[-1].number if found else 0


def test_two_jobs_writing_one_table_have_each_commit_announced_once_and_a_downstream_run_per_announcement(
        stack_settings, shared_table, monkeypatch):
    from streamfill.cli.stack.airflow import connections
    from streamfill.spark_jobs.pipelines import load

    t, api = shared_table, AirflowApi(stack_settings)
    # Airflow keeps one watcher of the table, whichever of the files declaring the asset it parsed last
    found = api.call("GET", f"/api/v2/assets/{t.asset}")
    assert [w["name"] for w in found["watchers"]] == [assets.WATCHER]
    assert {d["dag_id"] for d in found["scheduled_dags"]} == {*map(dag_ids.announce, t.jobs), t.downstream_dag}

    for job in t.jobs:
        t.store.ensure_job(job, "stream")
    _commit(t.store, t.jobs[0], 2)
    _commit(t.store, t.jobs[1], 1)
    # the table's one watcher as the DAG files declare it; its connections as Airflow's triggerer has them
    (watcher,) = assets.table_asset(load().values(), stack_settings.offsets_db_url, t.table).watchers
    for key, value in connections(stack_settings).items():
        monkeypatch.setenv(key, value)
    _as_triggerer_runs(watcher.trigger, lambda: all(_caught_up(t.store, job) for job in t.jobs), 60)
    _commit(t.store, t.jobs[0], 3)  # more commits of both, announced after the first announcements
    _commit(t.store, t.jobs[1], 2)
    _as_triggerer_runs(watcher.trigger, lambda: all(_caught_up(t.store, job) for job in t.jobs), 60)

    events = [(e["partition_key"], body) for e in _events(api, t.asset)
              if (body := from_extra(e["extra"])) is not None and body["job"] in t.jobs]
    committed = {job: announcements.commits(t.store.engine, job) for job in t.jobs}
    assert [len(c) for c in committed.values()] == [5, 3]
    assert asset_cover_problems(committed, events) == []
    # at least the two rounds, at most one event per commit: the stack's triggerer runs the same watcher and may
    # announce between two of a round's commits (each its own transaction), which splits that round in two
    counts = {job: sum(b["job"] == job for _, b in events) for job in t.jobs}
    assert all(2 <= counts[job] <= len(committed[job]) for job in t.jobs), counts
    # the downstream DAG ran once for each announcement of either job (its runs: one per key, never two)
    keys = sorted(key for key, _ in events)

    def runs() -> list[str]:
        found = api.call("GET", f"/api/v2/dags/{t.downstream_dag}/dagRuns?limit=100")["dag_runs"]
        return sorted(key for r in found if (key := r["partition_key"] or "").count(":") == 2 and
                      key.split(":")[1] in t.jobs)

    _wait(lambda: runs() == keys, 60, f"{t.downstream_dag} runs for keys {keys} (has {runs()})")


def _events_of(api: AirflowApi, asset: int, token: str) -> list[dict]:
    return [e for e in _events(api, asset) if (from_extra(e["extra"]) or {}).get("uuid") == token]


@pytest.mark.fault
def test_an_announcer_whose_lock_ended_with_its_postgresql_session_sends_nothing_while_another_holds_the_job(
        stack_settings, shared_table, db):
    """PostgreSQL ends the first announcer's session (a restart ends them all) while its loop goes on; a second
    announcer (another triggerer) takes the job. The first one's send, had it gone, would have been in flight
    while the second looked for it and sent it again."""
    t = shared_table
    job = f"{t.name}_lock"
    t.store.ensure_job(job, "stream")
    _commit(t.store, job, 2)
    second = Announcer(t.store.engine, lambda: AirflowApi(stack_settings), job, t.uri, timedelta(seconds=1))

    class InFlight(AirflowApi):
        """The first announcer's Airflow: while its send is under way, the second announcer steps."""

        def create_asset_event(self, *args, **kwargs) -> int:
            second.step(hold_2)
            return super().create_asset_event(*args, **kwargs)

    first = Announcer(t.store.engine, lambda: InFlight(stack_settings), job, t.uri, timedelta(seconds=1))
    with announcements.holding(t.store.engine, job) as hold_1:
        with db.begin() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": hold_1.pid})
        _wait(lambda: not announcements.held(t.store.engine, hold_1), 30, "the lock ended with its session")
        with announcements.holding(t.store.engine, job) as hold_2:
            assert hold_2 is not None
            first.step(hold_1)
            second.step(hold_2)
            assert announcements.held(t.store.engine, hold_2)
    (done,) = announcements.announced(t.store.engine, job)
    events = _events_of(AirflowApi(stack_settings), t.asset, done["uuid"])
    assert len(events) == 1, f"announcement 1 of {job} stored {len(events)} times"
    assert done["commits"] == [1, 2]


@pytest.mark.fault
def test_a_send_that_timed_out_at_the_client_is_not_sent_again_while_airflow_may_still_store_it(
        stack_settings, shared_table, monkeypatch):
    """Airflow takes longer than the client waits: storing an event of an asset that a partitioned DAG consumes
    takes a lock on the asset's row in Airflow's database, which a session of ours holds meanwhile (as a long
    transaction of Airflow's own would)."""
    t = shared_table
    job = f"{t.name}_timeout"
    t.store.ensure_job(job, "stream")
    _commit(t.store, job, 2)
    opened = urllib.request.urlopen
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout=None: opened(req, timeout=min(timeout, 3)))
    announcer = Announcer(t.store.engine, lambda: AirflowApi(stack_settings), job, t.uri, timedelta(seconds=1))
    airflow_db = create_engine(stack_settings.airflow_db_url)

    def waiting_in_airflow() -> int:
        """Airflow's sessions storing an event of the asset, waiting for its row (behind our lock, or behind
        another waiter)."""
        with airflow_db.connect() as conn:
            return conn.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE query LIKE :asset "
                                    "AND cardinality(pg_blocking_pids(pid)) > 0"),
                               {"asset": f"%FROM asset%WHERE asset.id = {t.asset} %"})

    try:
        with airflow_db.connect() as lock, announcements.holding(t.store.engine, job) as hold:
            lock.execute(text("SELECT id FROM asset WHERE id = :id FOR UPDATE"), {"id": t.asset})
            with pytest.raises((TimeoutError, urllib.error.URLError)):
                announcer.step(hold)
            _wait(lambda: waiting_in_airflow() == 1, 30, "Airflow storing the event, waiting for the lock")
            with suppress(TimeoutError, urllib.error.URLError):
                announcer.step(hold)  # the event is not in Airflow yet
            waiting = waiting_in_airflow()
            lock.rollback()
            assert waiting == 1, f"{waiting} sends of one announcement are under way in Airflow"
            # the send lands at last: found and recorded, not sent again
            _wait(lambda: announcer.step(hold) is not None and announcements.pending(t.store.engine, job) is None,
                  30, "the announcement found in Airflow")
        (done,) = announcements.announced(t.store.engine, job)
        assert len(_events_of(AirflowApi(stack_settings), t.asset, done["uuid"])) == 1
    finally:
        airflow_db.dispose()

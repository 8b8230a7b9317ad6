"""A stream's commits announced to Airflow as asset events, with no user's password: in an Airflow of its own
whose REST API has no password login (no user has a password, as under an auth manager whose users sign in only
by SSO, and no connection holds one), two jobs writing one table have each commit announced once, through a
try of the announce task killed after it recorded its attempt and a triggerer killed while commits went on; a
team's DAG that declares the table's `Asset(uri)` itself runs once per announcement. And each step of an
announcement against offsets_db: what a try that died handed over is sent again, what Airflow stored is recorded
and never repeated, and two announcers of one job are refused."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, text

from streamfill import REPO_ROOT, dag_ids
from streamfill.cli.stack.airflow import connections
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.datasets import PgTable
from streamfill.errors import ProtocolError
from streamfill.offsets_db import announcements
from streamfill.offsets_db.announce_due import wait_s
from streamfill.offsets_db.announce_plan import asset_cover_problems, commits_key, from_extra
from streamfill.offsets_db.store import OffsetStore
from streamfill.orchestration.announce import next_announcement
from streamfill.orchestration.connections import API_CONNECTION
from tests.existing_airflow import COMPONENTS, TheirAirflow, metadata_database
from tests.shared_run import OWN_AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(OWN_AIRFLOW_GROUP)]

# the deployment's processes, with the triggerer the announce tasks wait on
SSO_COMPONENTS = {**COMPONENTS, "triggerer": ["triggerer", "--skip-serve-logs"]}
FAILPOINT = "announce.attempting"  # the first try that hands over an announcement dies right after recording it


def _issued() -> str:
    """A name like the topic_name fixture's, for a fixture of the module: removed with what it names at the end."""
    from tests import conftest

    name = f"t_{uuid.uuid4().hex[:10]}"
    conftest.ISSUED.append(name)
    return name


def _commit(store: OffsetStore, job: str, n: int) -> None:
    """n more commits of 10 offsets on each of two partitions."""
    for _ in range(n):
        at = store.snapshot(job)
        ranges = [OffsetRange("events", p, at.get(("events", p), 0), at.get(("events", p), 0) + 10)
                  for p in (0, 1)]
        store.commit(job, store.record_planned(job, ranges), rows_written=19, dead_letters=1)


def _wait(condition, timeout: float, what: str, on_timeout=lambda: ""):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}. {on_timeout()}"
        time.sleep(1)
    return found


def _newest_commit(store: OffsetStore, job: str) -> int:
    found = announcements.commits(store.engine, job)
    return found[-1].number if found else 0


def _caught_up(store: OffsetStore, job: str) -> bool:
    """Every commit of the job announced, the last announcement known stored in Airflow."""
    done = announcements.announced(store.engine, job)
    return announcements.pending(store.engine, job) is None and bool(done) and \
        done[-1]["commits"][1] == _newest_commit(store, job)


def _downstream_dag(dag_id: str, uri: str, seen: str) -> str:
    """A team's DAG on the stream's table, declaring its asset by the URI as any asset is: one run per
    announcement, each noting its key in `seen` (no unique key: a second run for one key shows as a second row)."""
    return textwrap.dedent(f'''\
        from airflow.sdk import DAG, Asset, IdentityMapper, PartitionedAssetTimetable, get_current_context, task

        with DAG({dag_id!r}, catchup=False, tags=["team"],
                 schedule=PartitionedAssetTimetable(assets=Asset({uri!r}), default_partition_mapper=IdentityMapper())):
            @task
            def seen():
                from sqlalchemy import create_engine, text
                from streamfill.orchestration.endpoints import endpoints
                engine = create_engine(endpoints().db_url)
                with engine.begin() as conn:
                    conn.execute(text('CREATE TABLE IF NOT EXISTS "{seen}" (key text, run_id text)'))
                    conn.execute(text('INSERT INTO "{seen}" VALUES (:k, :r)'),
                                 {{"k": get_current_context()["dag_run"].partition_key,
                                   "r": get_current_context()["dag_run"].run_id}})
                engine.dispose()
            seen()
        ''')


@pytest.fixture(scope="module")
def sso_airflow(stack_settings, tmp_path_factory):
    """An Airflow of its own on the stack's PostgreSQL (a metadata database of its own) with streamfill's DAG file,
    a jobs file of two entries writing one table (announce_every 1s) and a team's DAG on that table. No user of
    its auth manager has a password and no connection holds one: its REST API's password login is off. The
    first announce try to hand over an announcement is killed right after recording its attempt."""
    root = tmp_path_factory.mktemp("sso_airflow")
    name = _issued()
    jobs, table = (f"{name}_a", f"{name}_b"), f"{name}_events"
    assets_db = f"postgres://{stack_settings.host}:{stack_settings.pg_port}/{stack_settings.db_name}"
    uri = PgTable.of(assets_db, table).asset_uri
    downstream = f"team_report__{name}"
    jobs_file = root / "config" / "streamfill_jobs.yaml"
    jobs_file.parent.mkdir()
    jobs_file.write_text("jobs:\n" + "".join(f"  {job}:\n    topic: {name}\n    table: {table}\n    announce_every: 1s\n"
                                             "    columns: {id: {type: string}}\n" for job in jobs))
    dags = root / "dags"
    dags.mkdir()
    (dags / "streamfill_dags.py").write_text((REPO_ROOT / "dags" / "streamfill_dags.py").read_text())
    (dags / "team_report.py").write_text(_downstream_dag(downstream, uri, f"{name}_seen"))
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "",  # Airflow's own auth manager, with no user to log in
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",  # a killed triggerer's triggers move on
        "AIRFLOW_VAR_STREAMFILL_JOBS_FILE": str(jobs_file),
        "STREAMFILL_HOME": str(root / "streamfill_home"),
        "STREAMFILL_ASSETS_DATABASE": assets_db,
        "STREAMFILL_FAILPOINT": FAILPOINT, "STREAMFILL_FAILPOINT_ACTION": "kill",
        "STREAMFILL_FAILPOINT_DIR": str(root / "failpoint"),
        **{k: v for k, v in connections(stack_settings).items() if k != f"AIRFLOW_CONN_{API_CONNECTION.upper()}"},
    }
    timings: dict[str, float] = {}
    t = time.monotonic()
    with metadata_database(stack_settings) as db_url:
        airflow = TheirAirflow(root, Path(sys.executable), stack_settings.host, db_url, env, components=SSO_COMPONENTS)
        # the DAGs stored before the scheduler starts, so the maintenance DAG (on at first, pruning the stack's
        # offsets_db) is paused before it could run here
        for args in (("db", "migrate"), ("dags", "reserialize"), ("dags", "pause", dag_ids.MAINTENANCE)):
            done = airflow.cli(*args, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        timings["database and DAGs"] = round(time.monotonic() - t, 1)
        airflow.start()
        metadata = create_engine(db_url)
        try:
            airflow.wait_healthy(timeout=300)
            _wait(lambda: (airflow.health().get("triggerer") or {}).get("status") == "healthy", 120,
                  "the triggerer healthy", airflow.tail)
            timings["cold start"] = round(time.monotonic() - t, 1)
            yield SimpleNamespace(airflow=airflow, name=name, jobs=jobs, table=table, uri=uri, downstream=downstream,
                                  metadata=metadata, failpoint=root / "failpoint",
                                  store=OffsetStore(stack_settings.offsets_db_url))
        finally:
            left = airflow.stop()
            metadata.dispose()
            print(f"the SSO Airflow: {timings}")
        assert left == [], f"processes left of {left}"


def _login_refused(url: str, user: str, password: str) -> int:
    """The HTTP status of Airflow's password login for `user`."""
    req = urllib.request.Request(f"{url}/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"username": user, "password": password}).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _events(metadata, uri: str) -> list[tuple[str | None, dict]]:
    """(partition key, extra's streamfill part) of the asset's events streamfill emitted, as Airflow stored them."""
    with metadata.connect() as conn:
        rows = conn.execute(text("SELECT e.partition_key, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                                 "WHERE a.uri = :uri ORDER BY e.id"), {"uri": uri}).all()
    return [(key, body) for key, extra in rows if (body := from_extra(extra)) is not None]


def _query(metadata, sql: str, **params) -> list:
    with metadata.connect() as conn:
        return conn.execute(text(sql), params).all()


@pytest.mark.fault
def test_with_password_login_off_two_jobs_on_one_table_announce_each_commit_once_through_a_killed_try_and_triggerer(
        stack_settings, sso_airflow, db):
    t, store = sso_airflow, sso_airflow.store
    user, password = stack_settings.airflow_login()
    assert _login_refused(t.airflow.url, user, password) == 401
    assert f"AIRFLOW_CONN_{API_CONNECTION.upper()}" not in t.airflow.env
    assert _query(t.metadata, "SELECT count(*) FROM connection") == [(0,)]
    for job in t.jobs:
        store.ensure_job(job, "stream")
    _commit(store, t.jobs[0], 2)
    _commit(store, t.jobs[1], 1)
    _wait(lambda: all(_caught_up(store, job) for job in t.jobs), 240, "the first commits announced", t.airflow.tail)
    # the first try that handed over an announcement died after recording its attempt; its retry sent it again
    assert (t.failpoint / "hits").exists()
    died = _query(t.metadata, "SELECT dag_id, try_number FROM task_instance_history WHERE dag_id LIKE :d "
                              "AND state IN ('failed', 'up_for_retry')", d=f"streamfill_announce__{t.name}%")
    assert died, "no try of an announce task was killed"

    # the triggerer killed while commits go on: the tasks waiting there wait on, and announce once it is back
    t.airflow.procs["triggerer"].send_signal(signal.SIGKILL)
    t.airflow.procs["triggerer"].wait(30)
    _commit(store, t.jobs[0], 3)
    _commit(store, t.jobs[1], 2)
    t.airflow.start(("triggerer",))
    _wait(lambda: all(_caught_up(store, job) for job in t.jobs), 240, "the commits made without a triggerer announced",
          t.airflow.tail)

    events = _events(t.metadata, t.uri)
    committed = {job: announcements.commits(store.engine, job) for job in t.jobs}
    assert [len(c) for c in committed.values()] == [5, 3]
    assert asset_cover_problems(committed, events) == []
    keys = sorted(key for key, _ in events)
    assert keys == sorted(commits_key(b["job"], b["announcement"])
                          for job in t.jobs for b in announcements.announced(store.engine, job))
    # the team's DAG, declaring the table's Asset(uri) itself, ran once per announcement
    def runs() -> list[str]:
        return sorted(r[0] for r in _query(t.metadata, "SELECT partition_key FROM dag_run WHERE dag_id = :d AND "
                                                       "state = 'success'", d=t.downstream))

    _wait(lambda: runs() == keys, 180, f"{t.downstream} runs for keys {keys}", lambda: f"has {runs()}")
    with db.connect() as conn:
        seen = [tuple(r) for r in conn.execute(text(f'SELECT key, count(*) FROM "{t.name}_seen" GROUP BY key'))]
    assert sorted(seen) == [(k, 1) for k in keys]
    print(f"{sum(map(len, committed.values()))} commits, {len(events)} announcements, {len(died)} try killed, "
          "the triggerer killed: announced = committed")


def test_what_a_try_that_died_handed_over_is_sent_again_what_airflow_stored_is_recorded_and_two_announcers_refused(
        stack_settings, topic_name):
    store, job, uri = OffsetStore(stack_settings.offsets_db_url), topic_name, "postgres://h:5432/d/public/t"
    store.ensure_job(job, "stream")
    every = timedelta(0)
    assert wait_s(store.engine, job, every) is None  # nothing committed: nothing to wait for
    _commit(store, job, 3)
    assert wait_s(store.engine, job, every) == 0

    def never(pending):
        raise AssertionError("an announcement nobody attempted is not looked up")

    first = next_announcement(store.engine, job, every, uri, never)
    assert (first.seq, first.extra["streamfill"]["commits"], first.partition_key) == (1, [1, 3], commits_key(job, 1))
    # its try died before Airflow stored it: looked up, not there, the same announcement is handed over again
    again = next_announcement(store.engine, job, every, uri, lambda pending: None)
    assert (again.id, again.token, again.extra, again.attempts) == (first.id, first.token, first.extra, 1)
    _commit(store, job, 2)
    assert wait_s(store.engine, job, timedelta(hours=1)) > 0  # the one in flight is looked at `every` after it

    # stored by the try that carried it: recorded as that event, and the next covers the commits after it
    stored = {str(first.token): 41}
    nxt = next_announcement(store.engine, job, every, uri, lambda pending: stored.get(str(pending.token)))
    assert announcements.announced(store.engine, job) == [first.extra["streamfill"]]
    assert (nxt.seq, nxt.extra["streamfill"]["commits"]) == (2, [4, 5])

    # another announcer recorded an attempt while this one looked the announcement up: it may be sending it
    def meanwhile(pending):
        assert announcements.attempting(store.engine, pending.id, pending.attempts)
        return None

    with pytest.raises(ProtocolError, match="more than one Airflow"):
        next_announcement(store.engine, job, every, uri, meanwhile)
    assert [a["commits"] for a in announcements.announced(store.engine, job)] == [[1, 3]]
    assert announcements.pending(store.engine, job).attempts == 2

"""offsets_db on the real PostgreSQL: migrations from empty, and the views over a known history."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.orm import Session

from streamfill.cli.stack.postgres import admin_url
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import ProtocolError
from streamfill.offsets_db.engine import make_engine
from streamfill.offsets_db.migrate import head, upgrade
from streamfill.offsets_db.models import Batch, BatchOffset, Job, Snapshot
from streamfill.offsets_db.store import OffsetStore

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_db(stack_settings):
    """An empty database of its own, dropped afterwards."""
    name = f"offsets_{uuid.uuid4().hex[:8]}"
    s = stack_settings
    admin = create_engine(admin_url(s), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER "{s.db_user}"'))
    url = make_url(stack_settings.offsets_db_url).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def test_db_upgrade_builds_every_table_and_view_from_empty(fresh_db):
    """Into a database where the team has a `jobs` table of its own in public: offsets_db's go to its schema."""
    engine = create_engine(fresh_db)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE public.jobs (title text); INSERT INTO public.jobs VALUES ('ours')"))
    env = {**os.environ, "STREAMFILL_DB_URL": fresh_db}
    cli = str(Path(sys.executable).parent / "streamfill")
    done = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    again = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, "a second upgrade changes nothing"
    with engine.connect() as conn:
        def names(kind: str, schema: str) -> set[str]:
            column = "tablename" if kind == "tables" else "viewname"
            return set(conn.execute(text(f"SELECT {column} FROM pg_{kind} WHERE schemaname = :s"),
                                    {"s": schema}).scalars())
        tables, views = names("tables", "streamfill"), names("views", "streamfill")
        assert names("tables", "public") == {"jobs"} and names("views", "public") == set()
        assert conn.execute(text("SELECT title FROM public.jobs")).scalars().all() == ["ours"]
    engine.dispose()
    assert tables == {"jobs", "runs", "batches", "batch_offsets", "snapshots", "data_loss_events", "dead_letters",
                      "quality_results", "job_leases", "announcements", "retention_horizons", "deleted_keys",
                      "alembic_version"}
    assert views == {"offset_history", "latest_offsets", "consumer_lag", "lag_history", "batch_throughput"}


def test_an_install_from_before_its_schema_moves_into_it_with_every_row(fresh_db):
    """A database upgraded to revision 0005 when offsets_db lived in public, with a history in every table:
    `streamfill db upgrade` moves tables and views into the schema, every row equal, sequences going on."""
    from streamfill.offsets_db import schema

    cli = str(Path(sys.executable).parent / "streamfill")
    env = {**os.environ, "STREAMFILL_DB_URL": fresh_db}
    before = subprocess.run([cli, "db", "upgrade", "0005"], env={**env, "STREAMFILL_DB_SCHEMA": "public"},
                            capture_output=True, text=True, timeout=120)
    assert before.returncode == 0, before.stderr
    later = ("announcements", "retention_horizons", "deleted_keys")  # tables of 0007, 0009 and 0010
    relations = [*(t for t in schema.tables() if t not in later), *schema.VIEWS]
    engine = create_engine(fresh_db)
    with engine.begin() as conn:  # revision 0005's columns, in SQL: today's models have more
        conn.execute(text("INSERT INTO public.jobs (name, kind, config) VALUES ('legacy-stream', 'stream', '{}'), "
                          "('legacy.backfill', 'backfill', '{}')"))
        conn.execute(text("INSERT INTO public.job_leases (job_id, generation, host, pid, backend_pid) SELECT id, 1, "
                          "'h', 1, 1 FROM public.jobs WHERE name = 'legacy-stream'"))
        conn.execute(text("INSERT INTO public.batches (job_id, seq, generation) SELECT id, 1, 1 FROM public.jobs "
                          "WHERE name = 'legacy-stream'"))
        conn.execute(text("INSERT INTO public.batch_offsets (batch_id, topic, partition, start_offset, end_offset, "
                          "log_start, log_end) SELECT id, 'orders', p, 0, e, 0, e + 10 FROM public.batches, "
                          "(VALUES (0, 10), (1, 5)) AS r(p, e)"))
        job_id = conn.execute(text("SELECT id FROM public.jobs WHERE name = 'legacy-stream'")).scalar_one()
        batch_id = conn.execute(text("SELECT max(id) FROM public.batches")).scalar_one()
        conn.execute(text("INSERT INTO public.runs (job_id, dag_id, status) VALUES (:j, 'dag', 'success')"),
                     {"j": job_id})
        conn.execute(text("UPDATE public.batches SET committed_at = now(), rows_written = 14, dead_letters = 1"))
        conn.execute(text("INSERT INTO public.snapshots (job_id, topic, partition, next_offset, batch_id) "
                          "VALUES (:j, 't', 0, 10, :b), (:j, 't', 1, 5, :b)"), {"j": job_id, "b": batch_id})
        conn.execute(text('INSERT INTO public.dead_letters (job_id, batch_id, topic, partition, "offset", raw_value, '
                          "error) VALUES (:j, :b, 't', 0, 3, 'x', 'json: not an object')"),
                     {"j": job_id, "b": batch_id})
        conn.execute(text("INSERT INTO public.data_loss_events (job_id, batch_id, kind, topic, partition, "
                          "lost_from, lost_to) VALUES (:j, :b, 'retention', 't', 1, 0, 2)"),
                     {"j": job_id, "b": batch_id})
        conn.execute(text("INSERT INTO public.quality_results (job_id, suite, table_name, success, statistics, "
                          "result) VALUES (:j, 's', 'orders', true, '{}', '{}')"), {"j": job_id})

        def everything(where: str) -> dict[str, list]:
            return {r: sorted(map(tuple, conn.execute(text(f'SELECT * FROM "{where}"."{r}"')).all()), key=repr)
                    for r in relations}
        old = everything("public")
    assert all(old[r] for r in relations), {r for r in relations if not old[r]}
    after = subprocess.run([cli, "db", "upgrade", "0006"], env=env, capture_output=True, text=True, timeout=120)
    assert after.returncode == 0, after.stderr
    with engine.begin() as conn:
        assert everything("streamfill") == old
        left = conn.execute(text("SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                 "WHERE n.nspname = 'public'")).scalars().all()
        assert left == [], f"left in public: {left}"
    newest = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert newest.returncode == 0, newest.stderr
    with engine.begin() as conn:  # 0007 numbers the commits made before it, the outbox of announcements
        assert conn.execute(text("SELECT j.commits, array_agg(b.commit_no) FROM streamfill.jobs j JOIN "
                                 "streamfill.batches b ON b.job_id = j.id WHERE j.id = :j GROUP BY j.commits"),
                            {"j": job_id}).one() == (1, [1])
        assert conn.execute(text("SELECT version_num FROM streamfill.alembic_version")).scalar_one() == head()
    store = OffsetStore(fresh_db)
    assert store.ensure_job("after-the-move", "stream") > job_id, "the id sequence moved with its table"
    store.engine.dispose()
    engine.dispose()


def test_an_install_at_an_older_revision_gets_the_revisions_it_lacks_then_moves(fresh_db):
    cli = str(Path(sys.executable).parent / "streamfill")
    env = {**os.environ, "STREAMFILL_DB_URL": fresh_db}
    older = subprocess.run([cli, "db", "upgrade", "0003"], env={**env, "STREAMFILL_DB_SCHEMA": "public"},
                           capture_output=True, text=True, timeout=120)
    assert older.returncode == 0, older.stderr
    engine = create_engine(fresh_db)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO public.jobs (name, kind, config) VALUES ('from-0003', 'stream', '{}')"))
    done = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM streamfill.jobs")).scalars().all() == ["from-0003"]
        assert conn.execute(text("SELECT to_regclass('streamfill.job_leases') IS NOT NULL AND "
                                 "to_regclass('public.jobs') IS NULL")).scalar_one()
        assert conn.execute(text("SELECT version_num FROM streamfill.alembic_version")).scalar_one() == head()
    engine.dispose()


def test_db_upgrade_against_an_unreachable_database_says_what_to_do():
    env = {**os.environ, "STREAMFILL_DB_URL": "postgresql+psycopg2://streamfill@127.0.0.1:1/nowhere"}
    cli = str(Path(sys.executable).parent / "streamfill")
    done = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 75  # out of reach (docs/operations.md#exit-codes)
    assert "127.0.0.1:1" in done.stderr and "streamfill stack up" in done.stderr and "Traceback" not in done.stderr


def test_views_return_the_numbers_of_a_known_history_and_keep_jobs_apart(fresh_db):
    upgrade(fresh_db)
    engine = make_engine(fresh_db)
    with Session(engine) as s, s.begin():
        a, b = Job(name="orders-stream", kind="stream"), Job(name="orders.backfill", kind="backfill")
        s.add_all([a, b])
        s.flush()
        for seq, (start, end, log_end) in enumerate([(0, 100, 150), (100, 150, 400)]):
            batch = Batch(job_id=a.id, seq=seq, spark_batch_id=seq, behind=log_end - end)
            s.add(batch)
            s.flush()
            s.add(BatchOffset(batch_id=batch.id, topic="orders", partition=0, start_offset=start, end_offset=end,
                              log_start=0, log_end=log_end))
        other = Batch(job_id=b.id, seq=0)
        s.add(other)
        s.flush()
        s.add(BatchOffset(batch_id=other.id, topic="orders", partition=0, start_offset=0, end_offset=7,
                          log_start=0, log_end=7))
        s.add_all([Snapshot(job_id=a.id, topic="orders", partition=0, next_offset=150),
                   Snapshot(job_id=b.id, topic="orders", partition=0, next_offset=7)])
    with engine.connect() as conn:
        history = conn.execute(text(
            "SELECT batch_seq, start_offset, end_offset, offsets FROM offset_history WHERE job = :j "
            "ORDER BY batch_seq"), {"j": "orders-stream"}).all()
        assert [tuple(r) for r in history] == [(0, 0, 100, 100), (1, 100, 150, 50)]
        which = conn.execute(text(
            "SELECT batch_seq FROM offset_history WHERE job = :j AND topic = 'orders' AND partition = 0 "
            "AND :o >= start_offset AND :o < end_offset"), {"j": "orders-stream", "o": 120}).scalar_one()
        assert which == 1
        latest = conn.execute(text("SELECT job, next_offset FROM latest_offsets ORDER BY job")).all()
        assert [tuple(r) for r in latest] == [("orders-stream", 150), ("orders.backfill", 7)]
        lag = conn.execute(text("SELECT job, log_end, lag FROM consumer_lag ORDER BY job")).all()
        assert [tuple(r) for r in lag] == [("orders-stream", 400, 250), ("orders.backfill", 7, 0)]
        trend = conn.execute(text(  # docs/offsets-db.md's "over the last hour" queries
            "SELECT date_trunc('minute', planned_at) AS minute, max(behind) AS behind FROM lag_history "
            "WHERE job = :j AND planned_at > now() - interval '1 hour' GROUP BY 1 ORDER BY 1"),
            {"j": "orders-stream"}).all()
        assert [r.behind for r in trend] == [250]
        per_partition = conn.execute(text(
            "SELECT date_trunc('minute', planned_at) AS minute, topic, partition, max(log_end - end_offset) AS behind "
            "FROM offset_history WHERE job = :j AND planned_at > now() - interval '1 hour' "
            "GROUP BY 1, 2, 3 ORDER BY 1"), {"j": "orders-stream"}).all()
        assert [r.behind for r in per_partition] == [250]
    engine.dispose()


def plan(start_end: dict[int, tuple[int, int]]):
    from streamfill.connectors.kafka.planner import OffsetRange

    return [OffsetRange("orders", p, s, e, 0, e + 10) for p, (s, e) in start_end.items()]


def test_store_records_plans_idempotently_and_commits_with_the_snapshot(fresh_db):
    from streamfill.offsets_db.store import OffsetStore

    upgrade(fresh_db)
    store = OffsetStore(fresh_db)
    store.ensure_job("orders-stream", "stream")
    store.ensure_job("other", "stream")
    first = store.record_planned("orders-stream", plan({0: (0, 10), 1: (0, 5)}), spark_batch_id=0)
    assert store.record_planned("orders-stream", plan({1: (0, 5), 0: (0, 10)})) == first, "a replay plans nothing new"
    assert store.snapshot("orders-stream") == {}
    assert store.commit("orders-stream", first, rows_written=15) is True
    assert store.snapshot("orders-stream") == {("orders", 0): 10, ("orders", 1): 5}
    assert store.commit("orders-stream", first, rows_written=999) is False, "committing a batch twice is a no-op"
    second = store.record_planned("orders-stream", plan({0: (10, 12), 1: (5, 5)}))
    assert second != first
    store.commit("orders-stream", second, rows_written=2)
    assert store.snapshot("orders-stream") == {("orders", 0): 12, ("orders", 1): 5}
    assert store.snapshot("other") == {}, "jobs never see each other's offsets"
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT batch_seq, committed FROM offset_history WHERE job = 'orders-stream' "
                                 "AND partition = 0 ORDER BY batch_seq")).all()
        written = conn.execute(text("SELECT rows_written FROM batches WHERE id = :b"), {"b": first}).scalar()
    assert [tuple(r) for r in rows] == [(1, True), (2, True)] and written == 15
    store.engine.dispose()



def test_a_checkpoint_behind_offsets_db_is_refused_and_one_a_foreign_sink_finished_is_accepted(fresh_db):
    from streamfill.offsets_db.store import CheckpointMismatch, OffsetStore

    upgrade(fresh_db)
    store = OffsetStore(fresh_db)
    store.ensure_job("s", "stream")
    first = store.record_planned("s", plan({0: (0, 10)}), start={("orders", 0): 0})
    store.commit("s", first)
    with pytest.raises(CheckpointMismatch, match="orders-0: checkpoint 3, offsets_db 10"):
        store.record_planned("s", plan({0: (3, 20)}), start={("orders", 0): 3})
    # a sink that does not commit offsets: Spark's checkpoint is one batch ahead of offsets_db
    second = store.record_planned("s", plan({0: (10, 20)}), start={("orders", 0): 10})
    third = store.record_planned("s", plan({0: (20, 25)}), start={("orders", 0): 20})
    assert store.snapshot("s") == {("orders", 0): 20}, "the batch Spark finished is committed on the way"
    assert third != second
    store.engine.dispose()


def test_offsets_cli_shows_history_latest_and_lag(fresh_db):
    from streamfill.offsets_db.store import OffsetStore

    upgrade(fresh_db)
    store = OffsetStore(fresh_db)
    store.ensure_job("cli-job", "stream")
    store.ensure_job("other", "stream")
    store.commit("cli-job", store.record_planned("cli-job", plan({0: (0, 10), 1: (0, 5)})))
    store.commit("other", store.record_planned("other", plan({0: (0, 99)})))
    store.engine.dispose()
    env = {**os.environ, "STREAMFILL_DB_URL": fresh_db}
    cli = str(Path(sys.executable).parent / "streamfill")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([cli, "offsets", *args], env=env, capture_output=True, text=True, timeout=120)

    import json

    latest = json.loads(run("latest", "--job", "cli-job", "--format", "json").stdout)
    assert [(r["partition"], r["next_offset"]) for r in latest] == [(0, 10), (1, 5)]
    lag = json.loads(run("lag", "--job", "cli-job", "--topic", "orders", "--format", "json").stdout)
    assert [(r["partition"], r["lag"]) for r in lag] == [(0, 10), (1, 10)]
    history = run("history", "--job", "cli-job", "--since", "1h")
    assert history.returncode == 0 and "history of job cli-job" in history.stdout and "99" not in history.stdout
    assert json.loads(run("history", "--job", "cli-job", "--since", "2100-01-01T00:00:00",
                          "--format", "json").stdout) == []
    unknown = run("latest", "--job", "nope")
    assert unknown.returncode == 2 and "job 'nope' is not in offsets_db; known jobs: cli-job, other" in unknown.stderr


def test_the_models_and_the_migrations_describe_the_same_schema(fresh_db):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import MetaData

    from streamfill.offsets_db.models import Base

    upgrade(fresh_db)
    placed = MetaData(schema="streamfill")  # the models' tables where the migrations put them
    for table in Base.metadata.sorted_tables:
        table.to_metadata(placed, schema="streamfill")
    # public first: "$user" would make streamfill the default schema, which autogenerate names as None
    engine = create_engine(fresh_db, connect_args={"options": "-c search_path=public"})
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "include_schemas": True, "version_table_schema": "streamfill",
            "include_name": lambda name, kind, _parent: kind != "schema" or name == "streamfill"})
        diff = compare_metadata(context, placed)
    engine.dispose()
    assert diff == []


def test_planning_records_how_far_behind_the_job_was(fresh_db):
    from streamfill.offsets_db.store import OffsetStore

    upgrade(fresh_db)
    store = OffsetStore(fresh_db)
    store.ensure_job("lagging", "stream")
    store.record_planned("lagging", plan({0: (0, 10), 1: (0, 5)}))  # log_end = end + 10 on each partition
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT behind FROM lag_history WHERE job = 'lagging'")).scalar() == 20
    store.engine.dispose()


def test_a_checkpoint_of_other_partitions_is_refused_before_anything_is_planned(stack_settings):
    """A job that read topic A, resumed from a checkpoint that only knows topic B: not this job's."""
    store = OffsetStore(stack_settings.offsets_db_url)
    job = f"ck-{uuid.uuid4().hex[:8]}"
    store.ensure_job(job, "stream")
    with store.hold(job) as lease:
        store.record_planned(job, [OffsetRange("a", 0, 0, 10)], start={("a", 0): 0}, generation=lease.generation)
        store.commit_through(job, {("a", 0): 10}, lease.generation)
        with pytest.raises(ProtocolError, match=r"is not this job's: none of its partitions is one the job has "
                                                r"read \(a-0\)"):
            store.record_planned(job, [OffsetRange("b", 0, 5, 10)], start={("b", 0): 5},
                                 generation=lease.generation, from_checkpoint=True)
    assert store.snapshot(job) == {("a", 0): 10}



def test_launches_against_an_older_offsets_db_are_refused_before_recording_and_upgrade_waits_for_streams(
        spark, fresh_db, bootstrap, topic_name, tmp_path):
    """An upgrade cannot half-happen: a stream and a backfill against offsets_db at revision 0007 are refused,
    naming both revisions and the command, with nothing recorded; `streamfill db upgrade` is refused while a
    stream holds its job, names it, and migrates under it only with --while-running."""
    import threading

    from streamfill.errors import RevisionMismatch
    from streamfill.offsets_db import fencing, revision
    from streamfill.spark_jobs import backfill, stream
    from streamfill.spark_jobs.pipelines import jobs_file
    from tests.integration.test_jobs import demo_topic
    from tests.job_helpers import run_here

    cli = str(Path(sys.executable).parent / "streamfill")
    env = {**os.environ, "STREAMFILL_DB_URL": fresh_db}
    older, needed = revision.revisions()[-2:]
    done = subprocess.run([cli, "db", "upgrade", older], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    demo_topic(bootstrap, topic_name, 50, 0.0)
    kafka, entries = {"bootstrap.servers": bootstrap}, str(jobs_file())
    launches = {
        "stream": lambda: stream.run(stream.StreamArgs(f"{topic_name}-s", topic_name, f"{topic_name}_s",
                                                       tmp_path / "ck", "available-now", None, pipeline="orders"),
                                     spark, kafka, fresh_db, threading.Event()),
        "backfill": lambda: backfill.run(backfill.BackfillArgs(f"{topic_name}-b", topic_name, "earliest", "latest",
                                                               f"{topic_name}_b", pipeline="orders"),
                                         spark, kafka, fresh_db)}
    for kind, launch in launches.items():
        code, out = run_here(entries, launch)
        assert code == 1 and f"offsets_db is at migration revision {older} and this streamfill needs revision " \
                              f"{needed}: stop the streams, then run `streamfill db upgrade`" in out, (kind, out)
    engine = create_engine(fresh_db)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM streamfill.jobs")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM pg_tables WHERE tablename LIKE :t"),
                            {"t": f"{topic_name}%"}).scalar_one() == 0
        job_id = conn.execute(text("INSERT INTO streamfill.jobs (name, kind, config) VALUES ('held', 'stream', '{}') "
                                   "RETURNING id")).scalar_one()
    with pytest.raises(RevisionMismatch, match=f"revision {older} .* needs revision {needed}"):
        OffsetStore(fresh_db).check_grants()

    lease = fencing.acquire(make_engine(fresh_db), "held", job_id)
    try:
        refused = subprocess.run([cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 73, refused.stdout  # held by another launch, free once it ends
        said = " ".join(refused.stderr.split())
        assert "1 stream(s) hold their jobs" in said and "held: a launch without a run row on host" in said \
            and "--while-running" in said, said
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM streamfill.alembic_version")).scalar_one() == older
        forced = subprocess.run([cli, "db", "upgrade", "--while-running"], env=env, capture_output=True, text=True,
                                timeout=120)
        assert forced.returncode == 0, forced.stderr
    finally:
        lease.release()
    OffsetStore(fresh_db).check_grants()  # at the code's revision now
    engine.dispose()


def test_behind_pgbouncer_a_launch_is_refused_unless_session_pooling_which_holds_and_frees_its_job(
        stack_settings, fresh_db):
    """A launch holds its job with a session's advisory lock (offsets_db.fencing). Through PgBouncer in transaction
    or statement pooling it is refused before anything is recorded, naming the pooler's setting and the URL
    without its password; in session pooling a launch holds the job, a second is refused, and a launch whose
    connection goes frees it. PgBouncer refuses streamfill's connections until told to ignore `options`."""
    import time

    from streamfill.errors import JobBusy
    from streamfill.offsets_db import fencing
    from streamfill.offsets_db.pooling import PoolingRefused
    from tests.integration.conftest import worker_ports
    from tests.private_services import pgbouncer

    upgrade(fresh_db)
    password = make_url(fresh_db).password
    direct = create_engine(fresh_db)

    def recorded() -> tuple[int, int]:
        with direct.connect() as conn:
            return (conn.execute(text("SELECT count(*) FROM streamfill.jobs")).scalar_one(),
                    conn.execute(text("SELECT count(*) FROM streamfill.job_leases")).scalar_one())

    def launch_refused(mode: str) -> str:
        store = OffsetStore(bouncer.url(mode))
        try:
            with pytest.raises(PoolingRefused) as refused:
                store.ensure_job("first", "stream")
            return str(refused.value)
        finally:
            store.engine.dispose()

    with pgbouncer(stack_settings, worker_ports(stack_settings.pg_port + 240), fresh_db) as bouncer:
        said = launch_refused("session")
        assert "unsupported startup parameter: options" in said and "ignore_startup_parameters = options" in said
        assert password not in said and f":{bouncer.port}/session" in said, said

        bouncer.configure(ignore_startup_parameters="options")
        said, deadline = launch_refused("transaction"), time.monotonic() + 30
        while "ignore_startup_parameters" in said and time.monotonic() < deadline:  # PgBouncer reloads a moment later
            time.sleep(0.2)
            said = launch_refused("transaction")
        assert "transaction" in said and "pool_mode = session" in said and "advisory lock" in said, said
        assert password not in said and f":{bouncer.port}/transaction" in said, said
        store = OffsetStore(bouncer.url("transaction"))
        with pytest.raises(PoolingRefused, match="pool_mode = session"):
            store.hold("first")
        store.engine.dispose()
        assert "statement" in launch_refused("statement")
        assert recorded() == (0, 0), "a refused launch records nothing"

        store = OffsetStore(bouncer.url("session"))
        store.ensure_job("held", "stream")
        lease = store.hold("held")
        with direct.connect() as conn:
            assert fencing.live_hold(conn.connection.cursor(), "held")[0] == lease.generation
        with pytest.raises(JobBusy, match="held by another launch"):
            OffsetStore(bouncer.url("session")).hold("held")
        lease._conn.connection.dbapi_connection.close()  # the launch's connection goes, as when its process dies
        deadline = time.monotonic() + 30
        while True:
            with direct.connect() as conn:
                if fencing.live_hold(conn.connection.cursor(), "held") is None:
                    break
            assert time.monotonic() < deadline, "PgBouncer's reset of the session freed the job"
            time.sleep(0.2)
        again = store.hold("held")
        assert again.generation == lease.generation + 1
        again.release()
        store.engine.dispose()
    direct.dispose()


def test_a_quiet_topics_stream_reads_healthy_past_its_threshold_and_unhealthy_once_records_wait(
        fresh_db, bootstrap, topic_name):
    """A stream whose newest commit is an hour old, at the log end of every partition: healthy at every check;
    one record produced and not read: unhealthy, naming the age."""
    from datetime import datetime, timedelta, timezone

    from streamfill.orchestration.stream_health import health
    from tests.kafka_helpers import create_topic, produce

    upgrade(fresh_db)
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": b"x", "partition": i % 2} for i in range(10)])
    store, job = OffsetStore(fresh_db), f"{topic_name}-quiet"
    store.ensure_job(job, "stream")
    batch = store.record_planned(job, [OffsetRange(topic_name, p, 0, 5) for p in range(2)])
    store.commit(job, batch, rows_written=10)
    engine = create_engine(fresh_db)
    with engine.begin() as conn:
        conn.execute(text("UPDATE streamfill.batches SET committed_at = now() - interval '1 hour'"))
    kafka = {"bootstrap.servers": bootstrap}
    for minutes in (20, 40, 60):  # health checks past the 15-minute threshold
        now = datetime.now(timezone.utc) + timedelta(minutes=minutes)
        checked = health(fresh_db, job, timedelta(minutes=15), 1000, kafka, now=now)
        assert checked.caught_up and checked.problems == [], checked
    produce(bootstrap, topic_name, [{"value": b"y", "partition": 0}])
    waiting = health(fresh_db, job, timedelta(minutes=15), 1000, kafka)
    assert not waiting.caught_up and len(waiting.problems) == 1, waiting
    assert "and has records left to read" in waiting.problems[0]
    store.engine.dispose()
    engine.dispose()

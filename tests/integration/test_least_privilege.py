"""streamfill in a database it does not own, with the three roles a DBA creates from `streamfill db grants`:
the migration owner upgrades, the job role streams, backfills, replays from Airflow and records quality, the
reader serves the page.
None of them is a superuser or owns the database; a grant taken away fails the launch, naming it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import psycopg2
import psycopg2.errors
import pytest
from sqlalchemy import create_engine, make_url, text

from streamfill import dag_ids
from streamfill.cli.stack.airflow import airflow_bin, airflow_env
from streamfill.cli.stack.postgres import admin_url
from streamfill.offsets_db import dashboard
from streamfill.offsets_db.engine import make_engine
from streamfill.orchestration.connections import postgres_connection
from streamfill.spark_jobs import backfill, quality, stream
from streamfill.spark_jobs.pipelines import jobs_file
from tests.airflow_helpers import left_to_dags_test
from tests.integration.test_jobs import demo_topic
from tests.job_helpers import orders_columns, run_here
from tests.shared_run import AIRFLOW_GROUP

# its replay runs the shared streamfill_replay DAG (one active run at a time) beside the other Airflow tests' runs
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]

CLI = str(Path(sys.executable).parent / "streamfill")


@pytest.fixture(scope="module")
def roles(stack_settings):
    """A database the stack's superuser owns, and the three roles made by running `streamfill db grants`'s
    output there; `streamfill db upgrade` run as the owner role. Dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {kind: f"lp_{tag}_{kind}" for kind in ("owner", "job", "reader")}
    database = f"lp_{tag}"
    admin = create_engine(admin_url(stack_settings), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    script = subprocess.run([CLI, "db", "grants", "--owner", names["owner"], "--job", names["job"], "--reader",
                             names["reader"], "--database", database], capture_output=True, text=True, timeout=60)
    assert script.returncode == 0, script.stderr
    inside = make_url(admin_url(stack_settings)).set(database=database).render_as_string(hide_password=False)
    scratch = create_engine(inside, isolation_level="AUTOCOMMIT")
    passwords = {kind: secrets.token_urlsafe(16) for kind in names}
    with scratch.connect() as conn:
        conn.exec_driver_sql(script.stdout)
        for kind, role in names.items():
            conn.execute(text(f'ALTER ROLE "{role}" PASSWORD \'{passwords[kind]}\''))
        powers = conn.execute(text("SELECT rolname, rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls "
                                   "FROM pg_roles WHERE rolname = ANY(:r)"), {"r": list(names.values())}).all()
        owner = conn.execute(text("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :d"),
                             {"d": database}).scalar_one()
    assert sorted(powers) == sorted((r, False) for r in names.values()) and owner not in names.values()
    base = make_url(stack_settings.offsets_db_url).set(database=database)
    urls = {kind: base.set(username=role, password=passwords[kind]).render_as_string(hide_password=False)
            for kind, role in names.items()}
    upgraded = subprocess.run([CLI, "db", "upgrade"], env={**os.environ, "STREAMFILL_DB_URL": urls["owner"]},
                              capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    yield SimpleNamespace(names=names, urls=urls, admin=scratch)
    scratch.dispose()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{database}" WITH (FORCE)'))
        for role in names.values():
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
    admin.dispose()


def test_jobs_run_as_the_job_role_the_page_reads_as_the_reader_and_a_missing_grant_is_named(
        spark, stack_settings, roles, bootstrap, topic_name, tmp_path):
    valid, bad = demo_topic(bootstrap, topic_name, 600, 0.05)
    job_url, kafka, jobs = roles.urls["job"], {"bootstrap.servers": bootstrap}, str(jobs_file())
    streamed, backfilled, replayed = f"{topic_name}_stream", f"{topic_name}_backfill", f"{topic_name}_replayed"

    def run_stream():
        return run_here(jobs, lambda: stream.run(stream.StreamArgs(
            f"{topic_name}-s", topic_name, streamed, tmp_path / "ck", "available-now", 200, pipeline="orders"),
            spark, kafka, job_url, threading.Event()))

    # a grant taken away: the launch names it and the statement that gives it back, having recorded nothing
    job_role = roles.names["job"]
    with roles.admin.connect() as conn:
        conn.execute(text(f'REVOKE INSERT ON streamfill.batches FROM "{job_role}"'))
    code, out = run_stream()
    grant = f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "streamfill" TO "{job_role}"'
    assert code == 1 and f"role {job_role} lacks INSERT on streamfill.batches: {grant}" in out, out
    with roles.admin.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM streamfill.jobs")).scalar_one() == 0
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": f"public.{streamed}"}).scalar_one() is None
        conn.execute(text(grant))

    code, out = run_stream()
    assert code == 0, out
    code, out = run_here(jobs, lambda: backfill.run(backfill.BackfillArgs(
        f"{topic_name}-b", topic_name, "earliest", "latest", backfilled, pipeline="orders"), spark, kafka, job_url))
    assert code == 0, out
    outcome = quality.validate(job_url, streamed, f"{topic_name}-s", pipeline="orders")
    assert outcome.success and outcome.result_id is not None, outcome.lines

    # a replay and its quality check from Airflow, its connection the job role's
    entries = tmp_path / "jobs.yaml"
    entries.write_text(f"jobs:\n  {topic_name}:\n    topic: {topic_name}\n    table: {topic_name}_events\n"
                       + orders_columns(4))
    conf = json.dumps({"job": topic_name, "from": "earliest", "to": "latest", "mode": "append-new",
                       "table": replayed, "chunk_size": 400})
    env = {**airflow_env(stack_settings), "STREAMFILL_JOBS_FILE": str(entries),
           "AIRFLOW_CONN_STREAMFILL_POSTGRES": json.dumps(postgres_connection(job_url))}
    # `dags test` runs the tasks here, with the job role's connection (the stack's workers have the owner's)
    with left_to_dags_test(stack_settings, dag_ids.REPLAY):
        done = subprocess.run([airflow_bin(), "dags", "test", dag_ids.REPLAY, "-c", conf], env=env,
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with roles.admin.connect() as conn:
        assert conn.execute(text("SELECT q.success FROM streamfill.quality_results q JOIN streamfill.jobs j "
                                 "ON j.id = q.job_id WHERE j.name LIKE :j"), {"j": f"{topic_name}.replay.%"}
                            ).scalars().all() == [True]

    # the reader: everything the page shows, and nothing it could change
    reader = make_engine(roles.urls["reader"])
    try:
        jobs_seen = {r["name"]: r for r in dashboard.overview(reader, datetime.now(timezone.utc), [])}
        assert {f"{topic_name}-s", f"{topic_name}-b"} < set(jobs_seen), "and the replay's"
        assert jobs_seen[f"{topic_name}-s"]["quality_ok"] is True
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        reasons = dashboard.dead_letter_reasons(reader, jobs_seen[f"{topic_name}-s"]["id"], since)
        assert sum(r["count"] for r in reasons) == len(bad)
        found = dashboard.find_offset(reader, f"{topic_name}-s", topic_name, 0, 5)
        assert found and found[0]["committed_at"] is not None
        assert dashboard.row_key(reader, streamed, ["event_id"], topic_name, 0, 5) is not None or \
            dashboard.dead_letter_at(reader, jobs_seen[f"{topic_name}-s"]["id"], topic_name, 0, 5) is not None
        with reader.connect() as conn, pytest.raises(Exception, match="permission denied"):
            conn.execute(text("DELETE FROM streamfill.dead_letters"))
    finally:
        reader.dispose()
    with psycopg2.connect(make_url(job_url).set(drivername="postgresql").render_as_string(hide_password=False)) \
            as conn, conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
        cur.execute("CREATE TABLE streamfill.not_a_job_table (x int)")  # offsets_db's DDL is the owner's
    with roles.admin.connect() as conn:
        rows = {t: conn.execute(text(f'SELECT count(*) FROM public."{t}"')).scalar_one()
                for t in (streamed, backfilled, replayed)}
    assert rows == {streamed: len(valid), backfilled: len(valid), replayed: len(valid)}


def test_the_page_reads_as_the_reader_through_its_own_connection_and_can_write_through_none(roles, monkeypatch):
    """The page in the API server: Airflow resolves a connection id alike there and in its workers (they ask the
    API server for it), so the workers' streamfill_postgres is the job role's; the page reads as the reader through
    streamfill_postgres_reader, and without that connection reads through the workers' in read-only sessions."""
    from streamfill.orchestration.connections import POSTGRES_CONNECTION, POSTGRES_READER_CONNECTION
    from streamfill.orchestration.ui import db as page_db

    def connection(conn_id: str, url: str | None) -> None:
        name = f"AIRFLOW_CONN_{conn_id.upper()}"
        if url is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, json.dumps(postgres_connection(url)))

    connection(POSTGRES_CONNECTION, roles.urls["job"])
    for reader, role in ((roles.urls["reader"], roles.names["reader"]), (None, roles.names["job"])):
        connection(POSTGRES_READER_CONNECTION, reader)
        page = page_db.use(page_db.database_url())
        try:
            with page.connect() as conn:
                assert conn.scalar(text("SELECT current_user")) == role
                assert conn.scalar(text("SELECT count(*) FROM streamfill.jobs")) is not None  # it reads
                with pytest.raises(Exception, match="read-only transaction"):
                    conn.execute(text("DELETE FROM streamfill.dead_letters"))
        finally:
            page.dispose()

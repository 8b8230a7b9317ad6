"""The test session leaves no trace in the stack a user works with: the jobs.d files, Airflow DAGs, offsets_db
jobs, tables and topics its tests made are removed at its end, so the DAG list and the streamfill page show
only the user's jobs. Tests name what they make after `topic_name` (t_<hex>), which this module is told of;
offsets_db jobs are recognised by a test name in theirs (and being newer than the session, not an entry of the
user's jobs file): a job a user starts meanwhile is never touched."""

from __future__ import annotations

import logging
import re
import urllib.error

from sqlalchemy import create_engine, text

from streamfill import REPO_ROOT, dag_ids
from streamfill.settings import Settings

log = logging.getLogger("streamfill.tests.cleanup")
TEST_NAME = re.compile(r"t_[0-9a-f]{10}")


def newest_job_id(settings: Settings) -> int:
    engine = create_engine(settings.offsets_db_url)
    try:
        with engine.connect() as conn:
            return conn.scalar(text("SELECT coalesce(max(id), 0) FROM jobs"))
    finally:
        engine.dispose()


def remove_traces(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    """Everything the session made; returns what was removed, one line each (steps that fail are logged and
    the others still run)."""
    names = [n for n in dict.fromkeys(names) if TEST_NAME.fullmatch(n)]
    done: list[str] = []
    for step in (_files, _dags, _offsets_db, _topics, _subjects):
        try:
            done += step(settings, since_job_id, names)
        except Exception as exc:  # noqa: BLE001 - cleaning up must not fail the session
            log.warning("cleanup step %s failed: %s", step.__name__, exc)
    return done


def _files(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    out = []
    for name in names:
        path = REPO_ROOT / "dags" / "jobs.d" / f"{name}.yaml"
        if path.exists():
            path.unlink()
            out.append(f"file {path}")
    return out


def _dags(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    if not names:
        return []
    from streamfill.orchestration.airflow_api import AirflowApi

    api, out = AirflowApi(settings), []
    for name in names:
        for dag_id in dag_ids.of_entry(name, True):
            try:
                api.call("DELETE", f"/api/v2/dags/{dag_id}")
                out.append(f"DAG {dag_id}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
    return out


def _offsets_db(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    from streamfill.spark_jobs.pipelines import load

    entries = sorted(load())
    engine = create_engine(settings.offsets_db_url)
    try:
        with engine.begin() as conn:
            jobs = conn.execute(text(
                "SELECT id, name, config->'backfill'->>'table' FROM jobs "
                "WHERE id > :since AND NOT name = ANY(:entries) AND name ~ 't_[0-9a-f]{10}' "
                "OR name = ANY(:names) OR split_part(name, '.', 1) = ANY(:names)"),
                {"since": since_job_id, "entries": entries, "names": names}).all()
            ids = [row[0] for row in jobs]
            conn.execute(text("DELETE FROM quality_results WHERE job_id = ANY(:ids)"), {"ids": ids})
            conn.execute(text("DELETE FROM jobs WHERE id = ANY(:ids)"), {"ids": ids})
            made = {t for _, _, t in jobs if t} | set(conn.scalars(text(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND ("
                "tablename = ANY(:names) OR split_part(tablename, '_', 1) || '_' || split_part(tablename, '_', 2) "
                "= ANY(:names) OR tablename LIKE '\\_sf\\_stage\\_t\\_%')"),
                {"names": names}))
            for table in sorted(made):
                if TEST_NAME.match(table) or table.startswith("_sf_stage_t_"):
                    conn.execute(text('DROP TABLE IF EXISTS "{}"'.format(table.replace('"', '""'))))
                    conn.execute(text("DELETE FROM deleted_keys WHERE split_part(target, '.', 2) = :t"), {"t": table})
    finally:
        engine.dispose()
    return [f"offsets_db job {name}" for _, name, _ in jobs] + [f"table {t}" for t in sorted(made)]


def _topics(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    if not names:
        return []
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [n for n in names if n in existing]
    for topic, future in (admin.delete_topics(doomed, operation_timeout=30).items() if doomed else []):
        future.result(timeout=60)
    return [f"topic {t}" for t in doomed]


def _subjects(settings: Settings, since_job_id: int, names: list[str]) -> list[str]:
    """Schema registry subjects of the session's topics (`<topic>-value`), deleted for good."""
    if not names:
        return []
    from confluent_kafka.schema_registry import SchemaRegistryClient

    registry = SchemaRegistryClient(settings.schema_registry())
    doomed = [s for s in registry.get_subjects() if any(s.startswith(f"{n}-") for n in names)]
    for subject in doomed:
        registry.delete_subject(subject)
        registry.delete_subject(subject, permanent=True)
    return [f"subject {s}" for s in doomed]

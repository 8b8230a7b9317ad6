"""Read-side of offsets_db for people and tasks: the views filtered by job, topic and time, a stream's health
inputs and the demo's summary. Bound parameters only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, select

from streamfill.errors import UnknownJob
from streamfill.names import validate_job_name
from streamfill.offsets_db import schema
from streamfill.offsets_db.models import Job
from streamfill.offsets_db.schema import statement

# view -> (columns shown, time column for --since, order)
VIEWS: dict[str, tuple[list[str], str | None, str]] = {
    "history": (["batch_seq", "spark_batch_id", "topic", "partition", "start_offset", "end_offset", "offsets",
                 "log_start", "log_end", "planned_at", "committed_at"], "planned_at",
                "batch_seq DESC, topic, partition"),
    "latest": (["topic", "partition", "next_offset", "batch_id", "updated_at"], "updated_at", "topic, partition"),
    "lag": (["topic", "partition", "next_offset", "log_end", "lag", "measured_at"], "measured_at",
            "topic, partition"),
}
_VIEW_NAMES = {"history": "offset_history", "latest": "latest_offsets", "lag": "consumer_lag"}


def rows(engine: Engine, view: str, job: str, topic: str | None = None, since: datetime | None = None,
         limit: int = 1000) -> list[dict[str, Any]]:
    columns, time_col, order = VIEWS[view]
    validate_job_name(job)
    with engine.connect() as conn:
        if conn.scalar(select(Job.id).where(Job.name == job)) is None:
            known = conn.scalars(select(Job.name).order_by(Job.name).limit(20)).all()
            raise UnknownJob(f"job {job!r} is not in offsets_db; known jobs: {', '.join(known) or 'none yet'}")
        where = ["job = :job"]
        if topic is not None:
            where.append("topic = :topic")
        if since is not None and time_col:
            where.append(f"{time_col} >= :since")
        # identifiers come from the fixed VIEWS table above, never from input
        view_name = schema.qualified(_VIEW_NAMES[view])
        stmt = statement(f"SELECT {', '.join(columns)} FROM {view_name} WHERE {' AND '.join(where)} "
                         f"ORDER BY {order} LIMIT :limit").bindparams(bindparam("limit"))
        params = {"job": job, "topic": topic, "since": since, "limit": limit}
        return [dict(r._mapping) for r in conn.execute(stmt, {k: v for k, v in params.items() if v is not None})]


def last_commit_and_worst_lag(engine: Engine, job: str) -> tuple[datetime | None, int | None]:
    """A stream's health inputs: when it last committed a batch, and its worst partition's lag (consumer_lag)."""
    validate_job_name(job)
    with engine.connect() as conn:
        last = conn.scalar(statement("SELECT max(b.committed_at) FROM {batches} b JOIN {jobs} j ON j.id = b.job_id "
                                "WHERE j.name = :job"), {"job": job})
        lag = conn.scalar(statement("SELECT max(lag) FROM {consumer_lag} WHERE job = :job"), {"job": job})
    return last, lag


@dataclass(frozen=True)
class Liveness:
    """Whether a launch of the job runs now (a session holds its lease: for a detached stream, its query's source on
    the server), which run that is, and the job's newest commit."""

    held: bool
    run_id: int | None
    last_commit: datetime | None


def liveness(engine: Engine, job: str) -> Liveness:
    """One statement: the job's lease and whether its holder is alive (its advisory lock), and its newest commit."""
    from streamfill.offsets_db.fencing import held_sql

    validate_job_name(job)
    with engine.connect() as conn:
        row = conn.execute(statement(
            "SELECT " + held_sql("j.id") + ", l.run_id, (SELECT max(b.committed_at) FROM {batches} b WHERE "
            "b.job_id = j.id) FROM {jobs} j LEFT JOIN {job_leases} l ON l.job_id = j.id WHERE j.name = :job"),
            {"job": job}).first()
    return Liveness(False, None, None) if row is None else Liveness(bool(row[0]), row[1], row[2])


def positions(engine: Engine, job: str) -> list[tuple[str, int, int]]:
    """(topic, partition, next offset) of the job, from latest_offsets."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(statement(
            "SELECT topic, partition, next_offset FROM {latest_offsets} WHERE job = :job"),
            {"job": validate_job_name(job)})]


def dead_letter_count(engine: Engine, job: str) -> int:
    with engine.connect() as conn:
        return conn.scalar(statement("SELECT count(*) FROM {dead_letters} d JOIN {jobs} j ON j.id = d.job_id "
                                "WHERE j.name = :job"), {"job": validate_job_name(job)})


def offsets_with_lag(engine: Engine, job: str) -> list[tuple[int, int, int | None]]:
    """(partition, next offset, lag) per partition of the job, from latest_offsets and consumer_lag."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(statement(
            "SELECT l.partition, l.next_offset, c.lag FROM {latest_offsets} l LEFT JOIN {consumer_lag} c "
            "USING (job, topic, partition) WHERE l.job = :job ORDER BY l.partition"), {"job": validate_job_name(job)})]


def newest_quality_results(engine: Engine, limit: int = 5) -> list[tuple]:
    """(checked_at, job, table, success, statistics) of the newest validations."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(statement(
            "SELECT q.checked_at, j.name, q.table_name, q.success, q.statistics FROM {quality_results} q "
            "LEFT JOIN {jobs} j ON j.id = q.job_id ORDER BY q.id DESC LIMIT :limit"), {"limit": limit})]


def commits_since(engine: Engine, job: str, after: int) -> list[dict[str, Any]]:
    """The job's commits numbered above `after`, in order: rows, dead letters, data-loss events found when each
    batch was planned, and the commit's time (the jobs' metrics)."""
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement("""
            SELECT b.commit_no, coalesce(b.rows_written, 0) AS rows, coalesce(b.dead_letters, 0) AS dead_letters,
                   b.commit_ms, (SELECT count(*) FROM {data_loss_events} e WHERE e.batch_id = b.id) AS data_loss
            FROM {batches} b JOIN {jobs} j ON j.id = b.job_id
            WHERE j.name = :job AND b.commit_no > :after ORDER BY b.commit_no"""), {"job": job, "after": after})]


def newest_commit(engine: Engine, job: str) -> int:
    """The number of the job's newest commit (0 before its first, or before the job exists)."""
    with engine.connect() as conn:
        return conn.scalar(statement("SELECT coalesce(max(commits), 0) FROM {jobs} WHERE name = :job"),
                           {"job": job})


def lag_per_partition(engine: Engine, job: str) -> list[tuple[str, int, int]]:
    """(topic, partition, lag) of the job from consumer_lag: the log end at its last planning less where it
    stands."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(statement(
            "SELECT topic, partition, lag FROM {consumer_lag} WHERE job = :job AND lag IS NOT NULL "
            "ORDER BY topic, partition"), {"job": job})]


def newest_dead_letters(engine: Engine, job: str, limit: int = 100) -> list[dict[str, Any]]:
    """The job's newest dead letters, newest first: where each record was, why it was refused and its raw value."""
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement(
            'SELECT d.topic, d.partition, d."offset", d.error, d.raw_value, d.created_at FROM {dead_letters} d '
            "JOIN {jobs} j ON j.id = d.job_id WHERE j.name = :job ORDER BY d.id DESC LIMIT :limit"),
            {"job": validate_job_name(job), "limit": limit})]

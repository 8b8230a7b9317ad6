"""Read-side of offsets_db for people: the three views filtered by job, topic and time, bound parameters only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, select, text

from offsets_db.models import Job
from offsets_db.names import validate_job_name

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


class UnknownJob(LookupError):
    pass


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
        stmt = text(f"SELECT {', '.join(columns)} FROM {_VIEW_NAMES[view]} WHERE {' AND '.join(where)} "
                    f"ORDER BY {order} LIMIT :limit").bindparams(bindparam("limit"))
        params = {"job": job, "topic": topic, "since": since, "limit": limit}
        return [dict(r._mapping) for r in conn.execute(stmt, {k: v for k, v in params.items() if v is not None})]

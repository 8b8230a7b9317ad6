"""When a job's announce task has work, for the trigger that waits for it on Airflow's triggerer
(orchestration/announce_trigger.py) without holding a worker: read-only, one short transaction, by PostgreSQL's
clock (the one `announcements.form` spaces announcements by)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from streamfill.offsets_db.models import Announcement, Batch, Job


def wait_s(engine: Engine, job: str, every: timedelta) -> float | None:
    """Seconds until the job's announce task has work: 0 for now; None while it has none until something is
    committed (or the job is created by its first launch). Work is an announcement formed but never sent; the next
    announcement, due `every` after the newest one when commits came since; or the newest one not yet known
    stored in Airflow, looked up (and sent again if it is not there) `every` after it was formed."""
    with Session(engine) as s:
        found = s.execute(select(Job.id, Job.commits, func.now().label("now")).where(Job.name == job)).first()
        if found is None:
            return None
        newest = s.execute(select(Announcement.last_commit, Announcement.created_at, Announcement.attempts,
                                  Announcement.delivered_at)
                           .where(Announcement.job_id == found.id).order_by(Announcement.seq.desc()).limit(1)).first()
        # before a first announcement a prune may have taken every commit (docs/operations.md): nothing to announce
        kept = newest is not None or s.scalar(select(func.max(Batch.commit_no)).where(Batch.job_id == found.id))
    if newest is None:
        return 0.0 if kept else None
    pending = newest.delivered_at is None
    if pending and newest.attempts == 0:
        return 0.0
    if not pending and found.commits <= newest.last_commit:
        return None
    return max((newest.created_at + every - found.now).total_seconds(), 0.0)

"""Where a job resumes: the snapshot of its committed positions, the start of a first batch that never committed,
and a new stream's first position pinned before any batch."""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from streamfill.offsets_db import fencing
from streamfill.offsets_db.batch_reads import batch_bounds, job_snapshot, last_batch
from streamfill.offsets_db.job_lookup import find_job, resolve_job
from streamfill.offsets_db.models import Job, Snapshot
from streamfill.partitions import Positions


def resume_state(engine: Engine, job_name: str) -> Positions:
    """The next offset per (topic, partition); empty for a job never committed (or never seen)."""
    with Session(engine) as s:
        job = find_job(s, job_name)
        return {} if job is None else job_snapshot(s, job.id)


def pin_start(engine: Engine, job_name: str, start: Positions, generation: int | None = None) -> bool:
    """A new stream's first position (its `start` resolved: the log end, or the first offset after a time) as
    the job's snapshot, before any batch: a relaunch before its first batch starts there again instead of at
    a `latest` resolved anew, which would skip what arrived in between. Only for a job with no snapshot and no
    batch; returns whether it pinned."""
    with Session(engine) as s, s.begin():
        job = resolve_job(s, job_name)
        s.execute(select(Job.id).where(Job.id == job.id).with_for_update())  # one planner at a time per job
        fencing.check(s, job.name, job.id, generation, refuse_live_holder=True)
        if job_snapshot(s, job.id) or last_batch(s, job.id) is not None:
            return False
        s.add_all([Snapshot(job_id=job.id, topic=tp.topic, partition=tp.partition, next_offset=offset)
                   for tp, offset in sorted(start.items())])
        return True


def first_start(engine: Engine, job_name: str) -> Positions:
    """Where a job that never committed planned its first batch: a restart must begin there again (a
    `latest` start resolved anew would skip what arrived in between). Empty when there is no such batch."""
    with Session(engine) as s:
        job = find_job(s, job_name)
        if job is None or job_snapshot(s, job.id):
            return {}
        last = last_batch(s, job.id)
        if last is None or last.committed_at is not None:
            return {}
        return {tp: b for tp, (b, _) in batch_bounds(s, last.id).items()}

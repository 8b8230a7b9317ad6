"""The API the connector and the jobs use to record plans, commit batches and resume.

Every write is one transaction; SQL is built by SQLAlchemy with bound parameters only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from offsets_db.models import Batch, BatchOffset, Job, Snapshot

JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


def validate_job_name(name: str) -> str:
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise ValueError(f"job name {name!r} is not valid: use 1 to 200 letters, digits, '_', '-' or '.', "
                         "e.g. orders-stream")
    return name


@dataclass(frozen=True)
class PlannedRange:
    topic: str
    partition: int
    start: int
    end: int
    log_start: int | None = None
    log_end: int | None = None


class OffsetStore:
    def __init__(self, url: str | Engine) -> None:
        self.engine = url if isinstance(url, Engine) else create_engine(url, pool_pre_ping=True)

    def ensure_job(self, name: str, kind: str, config: dict[str, Any] | None = None) -> int:
        validate_job_name(name)
        with Session(self.engine) as s, s.begin():
            s.execute(insert(Job).values(name=name, kind=kind, config=config or {})
                      .on_conflict_do_nothing(index_elements=[Job.name]))
            return s.scalar(select(Job.id).where(Job.name == name))

    def _job_id(self, s: Session, name: str) -> int:
        job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(name)))
        if job_id is None:
            raise LookupError(f"job {name!r} is not in offsets_db; it is created by its first run")
        return job_id

    def record_planned(self, job: str, ranges: Iterable[PlannedRange], spark_batch_id: int | None = None,
                       run_id: int | None = None) -> int:
        """The batch id of this plan; planning the same ranges again (a replay) returns the same batch."""
        ranges = sorted(ranges, key=lambda r: (r.topic, r.partition))
        with Session(self.engine) as s, s.begin():
            job_id = self._job_id(s, job)
            s.execute(select(Job.id).where(Job.id == job_id).with_for_update())  # one planner at a time per job
            last = s.scalar(select(Batch).where(Batch.job_id == job_id).order_by(Batch.seq.desc()).limit(1))
            if last is not None and self._same_plan(s, last.id, ranges):
                return last.id
            seq = (s.scalar(select(func.max(Batch.seq)).where(Batch.job_id == job_id)) or 0) + 1
            batch = Batch(job_id=job_id, seq=seq, spark_batch_id=spark_batch_id, run_id=run_id)
            s.add(batch)
            s.flush()
            s.add_all([BatchOffset(batch_id=batch.id, topic=r.topic, partition=r.partition, start_offset=r.start,
                                   end_offset=r.end, log_start=r.log_start, log_end=r.log_end) for r in ranges])
            return batch.id

    @staticmethod
    def _same_plan(s: Session, batch_id: int, ranges: list[PlannedRange]) -> bool:
        rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                                BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)
                         .order_by(BatchOffset.topic, BatchOffset.partition)).all()
        return [tuple(r) for r in rows] == [(r.topic, r.partition, r.start, r.end) for r in ranges]

    def commit(self, job: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0,
               session: Session | None = None) -> bool:
        """Mark the batch committed and move the job's snapshot to its ends, atomically.

        False when the batch was already committed (a replay): nothing changes. Pass `session` to commit
        inside a transaction that also moves the batch's rows.
        """
        if session is None:
            with Session(self.engine) as s, s.begin():
                return self.commit(job, batch_id, rows_written, dead_letters, session=s)
        s = session
        job_id = self._job_id(s, job)
        batch = s.scalar(select(Batch).where(Batch.id == batch_id, Batch.job_id == job_id).with_for_update())
        if batch is None:
            raise LookupError(f"batch {batch_id} of job {job!r} was never planned")
        if batch.committed_at is not None:
            return False
        ends = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.end_offset)
                         .where(BatchOffset.batch_id == batch_id)).all()
        if ends:
            stmt = insert(Snapshot).values([
                {"job_id": job_id, "topic": t, "partition": p, "next_offset": e, "batch_id": batch_id}
                for t, p, e in ends])
            s.execute(stmt.on_conflict_do_update(
                index_elements=[Snapshot.job_id, Snapshot.topic, Snapshot.partition],
                set_={"next_offset": stmt.excluded.next_offset, "batch_id": stmt.excluded.batch_id,
                      "updated_at": func.now()}))
        batch.committed_at = func.now()
        batch.rows_written = rows_written
        batch.dead_letters = dead_letters
        return True

    def snapshot(self, job: str) -> dict[tuple[str, int], int]:
        """The resume state: next offset per (topic, partition); empty for a job never committed."""
        with Session(self.engine) as s:
            job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(job)))
            if job_id is None:
                return {}
            rows = s.execute(select(Snapshot.topic, Snapshot.partition, Snapshot.next_offset)
                             .where(Snapshot.job_id == job_id)).all()
            return {(t, p): o for t, p, o in rows}

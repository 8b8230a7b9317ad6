"""Announcing committed data to Airflow, on offsets_db's side: the commits of a job by number (the outbox each
commit fills in its own transaction, offsets_db/batch_commit.py), the announcements formed from them and their
delivery state, and what one pass of a window's job committed.

Delivery (orchestration/announce.py, run by a task of Airflow's) goes: `form` records the next announcement
with its token and extra before anything is sent; `attempting` is committed before the task hands it to Airflow
as its outlet event; `delivered` records Airflow's event id once a later try or run of the task found it among
the asset's events. An announcement attempted but not known delivered is looked up by its token before it is
sent again, so a crash at any point neither loses nor repeats one."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, update
from sqlalchemy.orm import Session

from streamfill.offsets_db.announce_plan import COMMITS, Commit, Covered, commits_key, covering, from_extra, to_extra
from streamfill.offsets_db.job_lookup import resolve_job
from streamfill.offsets_db.models import Announcement, Batch, BatchOffset, DeadLetter, Job, Run


@dataclass(frozen=True)
class Pending:
    id: int
    seq: int
    token: uuid.UUID
    partition_key: str
    extra: dict[str, Any]
    attempts: int
    created_at: datetime


def commits(engine: Engine, job: str, after: int = 0, *, since_batch: int = 0) -> list[Commit]:
    """The job's commits numbered above `after` (and of batches above `since_batch`), in number order."""
    with Session(engine) as s:
        return _commits(s, resolve_job(s, job).id, after, since_batch)


def _commits(s: Session, job_id: int, after: int, since_batch: int) -> list[Commit]:
    rows = s.execute(
        select(Batch.commit_no, Batch.seq, Batch.committed_at, Batch.rows_written, Batch.dead_letters,
               BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset, BatchOffset.end_offset)
        .join(BatchOffset, BatchOffset.batch_id == Batch.id, isouter=True)
        .where(Batch.job_id == job_id, Batch.commit_no > after, Batch.id > since_batch)
        .order_by(Batch.commit_no)).all()
    out: dict[int, Commit] = {}
    for r in rows:
        c = out.get(r.commit_no) or Commit(r.commit_no, r.seq, r.committed_at, r.rows_written or 0,
                                           r.dead_letters or 0, ())
        if r.topic is not None:
            c = Commit(c.number, c.batch_seq, c.committed_at, c.rows, c.dead_letters,
                       (*c.ranges, (r.topic, r.partition, r.start_offset, r.end_offset)))
        out[r.commit_no] = c
    return list(out.values())


def newest_pass(engine: Engine, job: str) -> tuple[int, Covered | None]:
    """(pass number, what it committed) of a bounded job's newest pass: its commits of batches planned after
    the pass began (the backfill records both in its config). None when the pass committed nothing."""
    with Session(engine) as s:
        job_id = resolve_job(s, job).id
        config = s.scalar(select(Job.config).where(Job.id == job_id)) or {}
        plan = config.get("backfill") or {}
        found = _commits(s, job_id, 0, int(plan.get("since_batch", 0)))
    if not found:
        return int(plan.get("pass", 1)), None
    covered = covering(found, found[0].number - 1)
    # a re-run finds the dead letters of an earlier pass already stored (they are kept once per offset): the
    # window's count is of what its offsets hold, not of what this pass added
    spans = [and_(DeadLetter.topic == topic, DeadLetter.partition == int(partition), DeadLetter.offset >= start,
                  DeadLetter.offset < end)
             for topic, parts in covered.offsets.items() for partition, ranges in parts.items()
             for start, end in ranges]
    with Session(engine) as s:
        held = s.scalar(select(func.count()).select_from(DeadLetter)
                        .where(DeadLetter.job_id == job_id, or_(*spans)))
    return int(plan.get("pass", 1)), replace(covered, dead_letters=held)


def pending(engine: Engine, job: str) -> Pending | None:
    """The job's announcement formed but not known delivered (at most one)."""
    with Session(engine) as s:
        a = s.scalar(select(Announcement).where(Announcement.job_id == resolve_job(s, job).id,
                                                Announcement.delivered_at.is_(None)))
        return None if a is None else Pending(a.id, a.seq, a.token, a.partition_key, a.extra, a.attempts,
                                               a.created_at)


def form(engine: Engine, job: str, every: timedelta, asset_uri: str) -> Pending | None:
    """The next announcement of the job's commits, recorded; None while none is due (the previous one is less
    than `every` old by PostgreSQL's clock) or nothing new was committed. One transaction: the cursor is the
    previous announcement's last commit."""
    with Session(engine) as s, s.begin():
        job_id = resolve_job(s, job).id
        last = s.execute(select(Announcement.seq, Announcement.last_commit, Announcement.created_at,
                                func.now().label("now"))
                         .where(Announcement.job_id == job_id).order_by(Announcement.seq.desc()).limit(1)).first()
        if last is not None and last.created_at + every > last.now:
            return None
        after = last.last_commit if last is not None else 0
        newest = s.scalar(select(Job.commits).where(Job.id == job_id))
        if newest <= after:
            return None
    with Session(engine) as s:
        found = _commits(s, job_id, after, 0)
    if not found:
        return None
    if last is None:  # a first announcement starts at the oldest commit a prune left (offsets_db/retention.py)
        after = found[0].number - 1
    seq, token = (last.seq if last is not None else 0) + 1, uuid.uuid4()
    # the token travels as `uuid`: Airflow's API masks extra keys named like secrets (`token`), so a lookup by it
    # would never match
    extra = to_extra(COMMITS, job, covering(found, after), announcement=seq, uuid=str(token), asset=asset_uri)
    with Session(engine) as s, s.begin():
        job_id = resolve_job(s, job).id  # the job may have been removed since the first transaction
        a = Announcement(job_id=job_id, seq=seq, token=token, first_commit=found[0].number,
                         last_commit=found[-1].number, partition_key=commits_key(job, seq), extra=extra)
        s.add(a)
        s.flush()
        s.refresh(a)
        return Pending(a.id, a.seq, a.token, a.partition_key, a.extra, 0, a.created_at)


def attempting(engine: Engine, announcement_id: int, seen: int) -> bool:
    """Record an attempt to send the announcement, committed before it leaves; False (nothing recorded, nothing to
    send) when its attempts are no longer the `seen` ones: another announcer recorded one meanwhile and may be
    sending it."""
    with Session(engine) as s, s.begin():
        return s.execute(update(Announcement).where(Announcement.id == announcement_id,
                                                    Announcement.attempts == seen)
                         .values(attempts=Announcement.attempts + 1)
                         .execution_options(synchronize_session=False)).rowcount == 1


def delivered(engine: Engine, announcement_id: int, airflow_event_id: int) -> None:
    with Session(engine) as s, s.begin():
        s.execute(update(Announcement).where(Announcement.id == announcement_id)
                  .values(airflow_event_id=airflow_event_id, delivered_at=func.now(), last_error=None))


def announced(engine: Engine, job: str) -> list[dict[str, Any]]:
    """What the job's delivered announcements said (their extras' streamfill part), in order."""
    with Session(engine) as s:
        extras = s.scalars(select(Announcement.extra).where(Announcement.job_id == resolve_job(s, job).id,
                                                            Announcement.delivered_at.is_not(None))
                           .order_by(Announcement.seq)).all()
    return [from_extra(extra) for extra in extras]


def delivered_count(engine: Engine, job: str) -> int:
    """How many of the job's announcements were delivered; 0 before its first launch created the job."""
    with Session(engine) as s:
        job_id = s.scalar(select(Job.id).where(Job.name == job))
        if job_id is None:
            return 0
        return s.scalar(select(func.count()).where(Announcement.job_id == job_id,
                                                   Announcement.delivered_at.is_not(None)))


def lineage_run_of(engine: Engine, job: str, commit: int) -> str | None:
    """The OpenLineage run id of the launch that made commit number `commit` of the job."""
    with Session(engine) as s:
        found = s.scalar(select(Run.lineage_run_id).join(Batch, Batch.run_id == Run.id)
                         .where(Batch.job_id == resolve_job(s, job).id, Batch.commit_no == commit))
        return None if found is None else str(found)

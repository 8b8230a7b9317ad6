"""The exactly-once protocol, in one place: plan, pending batch, commit, resume.

0. fencing (`offsets_db.fencing`, docs/guarantees.md): one launch holds a job at a time; every
   plan and commit below
   carries its launch's generation and is refused, in its own transaction, when that launch lost the job.
1. plan: the source records each planned range before any task reads it (`record_plan`); planning the same
   ranges again (a replay) returns the same batch, and Spark's start is checked against the job's snapshot.
2. pending batch: the sink's commit takes the job's newest planned batch, locked (`pending_batch`); None when
   it is already committed (a replay: the sink drops what it staged). It must be its own launch's batch. A
   bounded write that names where its batch ends (the backfill's, which plans the next chunk while one is
   written) takes the newest batch ending exactly there instead, so a job may hold two pending batches; those
   commits take a per-job advisory lock, so they run one at a time while the job's plans go on.
3. commit: `commit_batch` opens ONE transaction, finds the pending batch, checks that the staged rows are that
   batch's (their offsets lie in its ranges), hands the cursor to the sink to move exactly the rows it staged
   (the sink checks their count), moves the staged dead letters, marks the batch committed, moves the job's
   snapshot to its ends and gives the batch the job's next commit number (`mark_committed`: the numbers are
   the outbox that announces commits to Airflow, offsets_db/announcements.py), then commits. A deadlock with
   another writer retries the whole transaction (the staged rows stay until a commit succeeds).
4. resume and checkpoint checks: `resume_state` is where a job continues; a Spark checkpoint that disagrees
   with it is refused (`CheckpointMismatch`), unless it shows the pending batch finished and its sink did not
   commit in offsets_db (then that batch is committed on the way, `commit_through` likewise).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg2.errors
from psycopg2 import sql
from sqlalchemy import BigInteger, Engine, func, literal, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from streamfill.offsets_db import fencing, schema
from streamfill.offsets_db.locks import wait_for_lock
from streamfill.offsets_db.models import Batch, BatchOffset, DataLossEvent, Job, Snapshot
from streamfill.errors import CheckpointMismatch, Fenced, ForeignCheckpoint, ProtocolError, UnknownJob
from streamfill.names import validate_job_name
from streamfill.partitions import Positions, TopicPartition

log = logging.getLogger("streamfill.exactly_once")

COMMIT_LOCK_SPACE = 0x5F13  # advisory-lock key space of a job's commits by ends: (COMMIT_LOCK_SPACE, job id)

@dataclass(frozen=True)
class PlannedRange:
    topic: str
    partition: int
    start: int
    end: int
    log_start: int | None = None
    log_end: int | None = None


class LossRecord(Protocol):
    """A data-loss event as the connector reports it (`connectors.kafka.data_loss.DataLoss`)."""

    topic: str
    partition: int
    kind: str
    lost_from: int
    lost_to: int


def job_id_of(s: Session, name: str) -> int:
    found = s.scalar(select(Job.id).where(Job.name == validate_job_name(name)))
    if found is None:
        raise UnknownJob(f"job {name!r} is not in offsets_db; it is created by its first run")
    return found


def _agrees(a: Positions, b: Positions) -> bool:
    return all(a[tp] == b[tp] for tp in a.keys() & b.keys())


def _agrees_fully(a: Positions, b: Positions) -> bool:
    return all(b.get(tp) == off for tp, off in a.items())


def _last_batch(s: Session, job: int, lock: bool = False) -> Batch | None:
    q = select(Batch).where(Batch.job_id == job).order_by(Batch.seq.desc()).limit(1)
    return s.scalar(q.with_for_update() if lock else q)


def _bounds(s: Session, batch_id: int) -> dict[TopicPartition, tuple[int, int]]:
    rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                            BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)).all()
    return {TopicPartition(t, p): (b, e) for t, p, b, e in rows}


def _snapshot(s: Session, job: int) -> Positions:
    rows = s.execute(select(Snapshot.topic, Snapshot.partition, Snapshot.next_offset)
                     .where(Snapshot.job_id == job)).all()
    return {TopicPartition(t, p): o for t, p, o in rows}


def installed(dbapi_conn) -> bool:
    """True when this database holds offsets_db (a job's offsets commit in the same transaction as its rows)."""
    with dbapi_conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (schema.qualified("batches"), schema.qualified("snapshots")))
        return bool(cur.fetchone()[0])


# 1. plan

def record_plan(engine: Engine, job: str, ranges: Iterable[PlannedRange], *, start: Positions | None = None,
                losses: Iterable[LossRecord] = (), spark_batch_id: int | None = None,
                run_id: int | None = None, generation: int | None = None, from_checkpoint: bool = False) -> int:
    """The batch id of this plan; planning the same ranges again (a replay) returns the same batch.

    `start` is where Spark's checkpoint says the batch starts (`from_checkpoint`: a query that resumed from an
    existing checkpoint); it must agree with the job's snapshot (CheckpointMismatch otherwise), and a
    checkpoint of another job is refused (ForeignCheckpoint). Data-loss events found while planning are stored with the batch.
    `generation` is the planning launch's hold on the job (`fencing.acquire`): a launch that lost the job is
    refused (Fenced); without one, only a job no live launch holds can be planned.
    """
    ranges = sorted(ranges, key=lambda r: (r.topic, r.partition))
    with Session(engine) as s, s.begin():
        job_id = job_id_of(s, job)
        s.execute(select(Job.id).where(Job.id == job_id).with_for_update())  # one planner at a time per job
        fencing.check(s, job, job_id, generation, refuse_live_holder=True)
        if run_id is None and generation is not None:
            run_id = fencing.run_of(s, job_id, generation)  # the launch's runs row: the offset finder's "run"
        last = _last_batch(s, job_id)
        ends = {TopicPartition(r.topic, r.partition): r.end for r in ranges}
        if last is not None and _same_plan(s, last.id, ranges) and (
                last.committed_at is None or _agrees_fully(ends, _snapshot(s, job_id))):
            if last.committed_at is None and generation is not None:
                last.generation = generation  # the launch holding the job now owns its pending batch
                last.run_id = run_id
            return last.id  # a replay: before its commit, or with the job still standing at its end
        if start is not None:
            _check_start(s, job, job_id, start, last, from_checkpoint)
        seq = (s.scalar(select(func.max(Batch.seq)).where(Batch.job_id == job_id)) or 0) + 1
        behind = sum(r.log_end - r.end for r in ranges if r.log_end is not None)
        batch = Batch(job_id=job_id, seq=seq, spark_batch_id=spark_batch_id, run_id=run_id, behind=behind,
                      generation=generation)
        s.add(batch)
        s.flush()
        s.add_all([BatchOffset(batch_id=batch.id, topic=r.topic, partition=r.partition, start_offset=r.start,
                               end_offset=r.end, log_start=r.log_start, log_end=r.log_end) for r in ranges])
        s.add_all([DataLossEvent(job_id=job_id, batch_id=batch.id, topic=e.topic, partition=e.partition,
                                 kind=e.kind, lost_from=e.lost_from, lost_to=e.lost_to) for e in losses])
        return batch.id


def record_losses(engine: Engine, job: str, losses: Iterable[LossRecord]) -> None:
    """Data loss that fails the query (failOnDataLoss=true): recorded without a batch, before the failure."""
    with Session(engine) as s, s.begin():
        job_id = job_id_of(s, job)
        s.add_all([DataLossEvent(job_id=job_id, topic=e.topic, partition=e.partition, kind=e.kind,
                                 lost_from=e.lost_from, lost_to=e.lost_to) for e in losses])


def _same_plan(s: Session, batch_id: int, ranges: list[PlannedRange]) -> bool:
    rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                            BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)
                     .order_by(BatchOffset.topic, BatchOffset.partition)).all()
    return [tuple(r) for r in rows] == [(r.topic, r.partition, r.start, r.end) for r in ranges]


def _check_start(s: Session, job: str, job_id: int, start: Positions, last: Batch | None,
                 from_checkpoint: bool = False) -> None:
    snap = _snapshot(s, job_id)
    if start and snap and not start.keys() & snap.keys():
        raise ForeignCheckpoint(job, start, "none of its partitions is one the job has read ("
                                + ", ".join(f"{t}-{p}" for t, p in sorted(snap)[:10]) + ")")
    if not snap:
        if not (from_checkpoint and start):
            return
        if last is not None and last.committed_at is None:
            bounds = _bounds(s, last.id)
            if {tp: b for tp, (b, _) in bounds.items()} == dict(start):
                return  # the job's own first batch, planned again
            if {tp: e for tp, (_, e) in bounds.items()} == {tp: o for tp, o in start.items() if tp in bounds}:
                mark_committed(s, job, last.id)  # Spark finished it; a sink other than ours left it uncommitted
                return
        raise ForeignCheckpoint(job, start, "the job has no committed position in offsets_db, so the "
                                "checkpoint was written by another job (or offsets_db was reset)")
    if _agrees(start, snap):
        return
    if last is not None and last.committed_at is None:
        bounds = _bounds(s, last.id)
        begins = {tp: b for tp, (b, _) in bounds.items()}
        ends = {tp: e for tp, (_, e) in bounds.items()}
        if _agrees(begins, snap) and _agrees(start, ends):
            # Spark's checkpoint shows the batch completed; its sink did not commit in offsets_db
            mark_committed(s, job, last.id)
            return
    raise CheckpointMismatch(job, start, snap)


# 2. pending batch

def pending_batch(s: Session, job: str, generation: int | None = None, ends: Positions | None = None) -> int | None:
    """Inside the sink's transaction: the job's newest planned batch (with `ends`, the newest ending exactly
    there), locked, or None when it is already committed (a replay: the sink drops its staged rows). It must
    have been planned by the launch that holds the job now (and by `generation`, the committing launch, when
    given): Fenced otherwise."""
    job_id = job_id_of(s, job)
    if ends is not None:  # a job's batches in flight commit one at a time; its plans are not held up
        # the other commit may itself wait for a lock on the table (a colleague's CREATE INDEX): wait as long
        wait_for_lock(s.connection().connection.dbapi_connection.cursor(), "SELECT pg_advisory_xact_lock(%s, %s)",
                      (COMMIT_LOCK_SPACE, job_id), what=f"job {job}: a commit waiting for the job's other commit")
    current = fencing.check(s, job, job_id, generation, refuse_live_holder=False)
    last = _last_batch(s, job_id, lock=True) if ends is None else _batch_ending_at(s, job_id, ends)
    if last is None and ends is not None:
        raise ProtocolError(f"job {job!r} has no planned batch ending at {_shape(ends)}: give the sink the "
                            "endingOffsets its source read to")
    if last is None:
        raise ProtocolError(f"job {job!r} has no planned batch: give the source the same job option as the sink")
    if last.committed_at is not None:
        return None
    if last.generation is not None and last.generation != current:
        raise Fenced(f"batch {last.seq} of job {job!r} was planned by a launch that no longer holds the job "
                     f"(generation {last.generation}, now {current}); its rows are dropped and the holder plans "
                     "the batch again")
    if ends is not None or s.scalar(select(Job.kind).where(Job.id == job_id)) == "stream":
        # the batch starts where the job stands (docs/connectors.md), but where data loss moved
        # its start
        lost = {tuple(r) for r in s.execute(select(DataLossEvent.topic, DataLossEvent.partition)
                                            .where(DataLossEvent.batch_id == last.id))}
        begins = {tp: b for tp, (b, _) in _bounds(s, last.id).items() if (tp.topic, tp.partition) not in lost}
        snap = _snapshot(s, job_id)
        if snap and not _agrees(begins, snap) and ends is None:
            raise CheckpointMismatch(job, begins, snap)
        if snap and not _agrees(begins, snap):  # a batch in flight (by ends) whose predecessor did not commit
            raise ProtocolError(f"job {job!r}: batch {last.seq} starts at {_shape(begins)}, but the job stands at "
                                f"{_shape({tp: snap[tp] for tp in begins if tp in snap})}: a batch before it on "
                                "those partitions has not committed. Nothing is committed; commit that batch first")
    return last.id


def _batch_ending_at(s: Session, job_id: int, ends: Positions) -> Batch | None:
    """The job's newest batch whose ranges end exactly at `ends` (the same partitions, the same ends), locked."""
    ending = (select(BatchOffset.batch_id).join(Batch, Batch.id == BatchOffset.batch_id)
              .where(Batch.job_id == job_id,
                     tuple_(BatchOffset.topic, BatchOffset.partition, BatchOffset.end_offset)
                     .in_([(tp.topic, tp.partition, end) for tp, end in ends.items()]))
              .group_by(BatchOffset.batch_id).having(func.count() == len(ends)))
    ranges = (select(BatchOffset.batch_id).where(BatchOffset.batch_id.in_(ending))
              .group_by(BatchOffset.batch_id).having(func.count() == len(ends)))
    return s.scalar(select(Batch).where(Batch.id.in_(ranges)).order_by(Batch.seq.desc()).limit(1)
                    .with_for_update())


def _shape(positions: Positions) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}: {off}" for tp, off in sorted(positions.items())) or "nothing"


def check_offsets(s: Session, job: str, batch_id: int, staged: Mapping[TopicPartition, tuple[int, int]]) -> None:
    """The staged rows must be this batch's: per partition, their lowest and highest offset inside its range.
    Rows of another launch's batch (read from other offsets) are refused, never committed as this one."""
    bounds = _bounds(s, batch_id)
    for tp, (low, high) in sorted(staged.items()):
        begin, end = bounds.get(tp, (None, None))
        if begin is None or low < begin or high >= end:
            seq = s.scalar(select(Batch.seq).where(Batch.id == batch_id))
            planned = f"[{begin}, {end})" if begin is not None else "nothing of that partition"
            raise ProtocolError(f"job {job!r}: staged rows of {tp.topic}-{tp.partition} at offsets {low}..{high} "
                                f"are not batch {seq}'s (it planned {planned}). They were read by another launch "
                                "or another query with the same job option; nothing is committed and the batch "
                                "fails, so Spark replays it")


# 3. commit

def mark_committed(s: Session, job: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0,
                   spark_batch_id: int | None = None) -> bool:
    """Mark the batch committed and move the job's snapshot to its ends, inside the caller's transaction.

    False when the batch was already committed (a replay): nothing changes.
    """
    job_id = job_id_of(s, job)
    batch = s.scalar(select(Batch).where(Batch.id == batch_id, Batch.job_id == job_id).with_for_update())
    if batch is None:
        raise ProtocolError(f"batch {batch_id} of job {job!r} was never planned")
    if batch.committed_at is not None:
        return False
    # one statement of a fixed shape (compiled once, cached): the batch's ends become the snapshot
    stmt = insert(Snapshot.__table__).from_select(
        ["job_id", "topic", "partition", "next_offset", "batch_id"],
        select(literal(job_id, BigInteger), BatchOffset.topic, BatchOffset.partition, BatchOffset.end_offset,
               BatchOffset.batch_id).where(BatchOffset.batch_id == batch_id))
    s.connection().execute(stmt.on_conflict_do_update(
        index_elements=["job_id", "topic", "partition"],
        set_={"next_offset": stmt.excluded.next_offset, "batch_id": stmt.excluded.batch_id,
              "updated_at": func.now()}))
    batch.committed_at = func.now()
    batch.commit_ms = func.extract("epoch", func.clock_timestamp() - func.now()) * 1000
    # the job's next commit number, under its row's lock until this transaction ends: numbers become visible
    # in order, so an announcer reading them in order never skips one
    batch.commit_no = s.execute(update(Job).where(Job.id == job_id).values(commits=Job.commits + 1)
                                .returning(Job.commits)).scalar_one()
    if spark_batch_id is not None:
        batch.spark_batch_id = spark_batch_id
    batch.rows_written = rows_written
    batch.dead_letters = dead_letters
    return True


@dataclass(frozen=True)
class StagedDeadLetters:
    """Where a sink staged its dead letters: a table with topic, partition, "offset", _raw, _error and
    _sf_write_id columns, and the writes of this batch."""

    stage: sql.Composable
    write_ids: Sequence[str]


class StagedBatch(Protocol):
    """The sink's half of a commit: it only stages and moves rows; the protocol owns the transaction."""

    dead_letters: StagedDeadLetters | None
    offsets: Mapping[TopicPartition, tuple[int, int]]  # lowest and highest offset staged per partition

    def move(self, cur) -> int:
        """Move exactly the staged rows of this batch into the target; return how many landed. Raises when
        staged rows are missing. The sink empties its stage after the commit (or a replay)."""


@dataclass(frozen=True)
class Committed:
    batch_id: int | None  # None: no job (an atomic write without offsets) or a replay
    rows: int = 0
    dead_letters: int = 0
    replay: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # the job's configuration (commitToGroup)
    snapshot: Positions = field(default_factory=dict)  # where the job stands now


def commit_batch(engine: Engine, job: str | None, staged: StagedBatch, *, spark_batch_id: int | None = None,
                 generation: int | None = None, ends: Positions | None = None, tries: int = 3) -> Committed:
    """One transaction: the pending batch (the one ending at `ends`, when given), the sink's move, the dead
    letters, the offsets and the snapshot.

    Without a job the rows still move atomically, with no offsets. Two jobs moving overlapping keys into one
    table can deadlock; PostgreSQL aborts one transaction, which is whole again on retry."""
    for attempt in range(1, tries + 1):
        try:
            return _commit_once(engine, job, staged, spark_batch_id, generation, ends)
        except (DBAPIError, psycopg2.Error) as exc:
            if not isinstance(getattr(exc, "orig", exc), psycopg2.errors.DeadlockDetected) or attempt == tries:
                raise
            log.warning("job %s: commit deadlocked with another writer, retrying (%d/%d)", job, attempt, tries)
            time.sleep(random.uniform(0.1, 1.0) * attempt)
    raise AssertionError("unreachable")


def _commit_once(engine: Engine, job: str | None, staged: StagedBatch, spark_batch_id: int | None,
                 generation: int | None, ends: Positions | None) -> Committed:
    with Session(engine) as s, s.begin():
        cur = s.connection().connection.dbapi_connection.cursor()
        if job is None:
            return Committed(None, staged.move(cur))
        batch_id = pending_batch(s, job, generation, ends)
        job_id = job_id_of(s, job)
        config = s.scalar(select(Job.config).where(Job.id == job_id)) or {}
        if batch_id is None:
            log.info("job %s: batch already committed (replay); staged rows dropped", job)
            return Committed(None, replay=True, config=config, snapshot=_snapshot(s, job_id))
        check_offsets(s, job, batch_id, staged.offsets)
        moved = staged.move(cur)
        dead = _move_dead_letters(cur, staged.dead_letters, job_id, batch_id) if staged.dead_letters else 0
        mark_committed(s, job, batch_id, rows_written=moved, dead_letters=dead, spark_batch_id=spark_batch_id)
        s.flush()
        return Committed(batch_id, moved, dead, config=config, snapshot=_snapshot(s, job_id))


def _move_dead_letters(cur, staged: StagedDeadLetters, job_id: int, batch_id: int) -> int:
    """Staged rows with an _error into dead_letters, once per (job, topic, partition, offset)."""
    cur.execute(sql.SQL(schema.sql(
        'INSERT INTO {dead_letters} (job_id, batch_id, topic, partition, "offset", raw_value, error) '
        'SELECT DISTINCT ON (topic, partition, "offset") %s, %s, topic, partition, "offset", _raw, _error '
        "FROM {{}} WHERE _sf_write_id = ANY(%s) AND _error IS NOT NULL "
        'ORDER BY topic, partition, "offset" ON CONFLICT (job_id, topic, partition, "offset") DO NOTHING')).format(
        staged.stage), (job_id, batch_id, list(staged.write_ids)))
    return cur.rowcount


def commit_through(engine: Engine, job: str, end: Positions, generation: int | None = None) -> bool:
    """Commit the newest planned batch if it ends at `end`: Spark committed it and the sink did not (a sink
    other than streamfill_postgres)."""
    with Session(engine) as s, s.begin():
        job_id = job_id_of(s, job)
        current = fencing.check(s, job, job_id, generation, refuse_live_holder=False)
        last = _last_batch(s, job_id, lock=True)
        if last is None or last.committed_at is not None:
            return False
        if last.generation is not None and last.generation != current:
            return False
        ends = {tp: e for tp, (_, e) in _bounds(s, last.id).items()}
        if ends != {tp: o for tp, o in end.items() if tp in ends}:
            return False
        return mark_committed(s, job, last.id)


# 4. resume

def resume_state(engine: Engine, job: str) -> Positions:
    """The next offset per (topic, partition); empty for a job never committed (or never seen)."""
    with Session(engine) as s:
        job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(job)))
        return {} if job_id is None else _snapshot(s, job_id)


def pin_start(engine: Engine, job: str, start: Positions, generation: int | None = None) -> bool:
    """A new stream's first position (its `start` resolved: the log end, or the first offset after a time) as
    the job's snapshot, before any batch: a relaunch before its first batch starts there again instead of at
    a `latest` resolved anew, which would skip what arrived in between. Only for a job with no snapshot and no
    batch; returns whether it pinned."""
    with Session(engine) as s, s.begin():
        job_id = job_id_of(s, job)
        s.execute(select(Job.id).where(Job.id == job_id).with_for_update())  # one planner at a time per job
        fencing.check(s, job, job_id, generation, refuse_live_holder=True)
        if _snapshot(s, job_id) or _last_batch(s, job_id) is not None:
            return False
        s.add_all([Snapshot(job_id=job_id, topic=tp.topic, partition=tp.partition, next_offset=offset)
                   for tp, offset in sorted(start.items())])
        return True


def first_start(engine: Engine, job: str) -> Positions:
    """Where a job that never committed planned its first batch: a restart must begin there again (a
    `latest` start resolved anew would skip what arrived in between). Empty when there is no such batch."""
    with Session(engine) as s:
        job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(job)))
        if job_id is None or _snapshot(s, job_id):
            return {}
        last = _last_batch(s, job_id)
        if last is None or last.committed_at is not None:
            return {}
        return {tp: b for tp, (b, _) in _bounds(s, last.id).items()}


def commit(engine: Engine, job: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0) -> bool:
    """`mark_committed` in a transaction of its own: for a batch whose rows another system already holds."""
    with Session(engine) as s, s.begin():
        return mark_committed(s, job, batch_id, rows_written, dead_letters)

"""Committing a staged batch: one transaction moves the sink's staged rows and dead letters, marks the batch
committed and moves the job's snapshot to its ends (docs/guarantees.md)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2.errors
from psycopg2 import sql
from sqlalchemy import BigInteger, Engine, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from streamfill.errors import ProtocolError
from streamfill.offsets_db import fencing, schema
from streamfill.offsets_db.batch_reads import batch_bounds, job_snapshot, last_batch
from streamfill.offsets_db.job_lookup import ResolvedJob, resolve_job
from streamfill.offsets_db.models import Batch, BatchOffset, Job, Snapshot
from streamfill.offsets_db.pending_batch import check_offsets, pending_batch
from streamfill.partitions import Positions, TopicPartition

log = logging.getLogger("streamfill.exactly_once")

# what fails a commit's transaction without anything being wrong with it, so it is tried again whole: a deadlock
# (40P01) and a lock held past lock_timeout (55P03, which pg_advisory_xact_lock and row locks meet as well)
RETRIED = {psycopg2.errors.DeadlockDetected: "deadlocked with another writer",
           psycopg2.errors.LockNotAvailable: "waited past lock_timeout for a lock another session holds"}


def installed(dbapi_conn) -> bool:
    """True when this database holds offsets_db (a job's offsets commit in the same transaction as its rows)."""
    with dbapi_conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (schema.qualified("batches"), schema.qualified("snapshots")))
        return bool(cur.fetchone()[0])


def mark_committed(s: Session, job: ResolvedJob, batch_id: int, rows_written: int = 0, dead_letters: int = 0,
                   spark_batch_id: int | None = None) -> bool:
    """Mark the batch committed and move the job's snapshot to its ends, inside the caller's transaction; the
    batch gets the job's next commit number, the outbox that announces commits (offsets_db/announcements.py).

    False when the batch was already committed (a replay): nothing changes.
    """
    batch = s.scalar(select(Batch).where(Batch.id == batch_id, Batch.job_id == job.id).with_for_update())
    if batch is None:
        raise ProtocolError(f"batch {batch_id} of job {job.name!r} was never planned")
    if batch.committed_at is not None:
        return False
    # one statement of a fixed shape (compiled once, cached): the batch's ends become the snapshot
    stmt = insert(Snapshot.__table__).from_select(
        ["job_id", "topic", "partition", "next_offset", "batch_id"],
        select(literal(job.id, BigInteger), BatchOffset.topic, BatchOffset.partition, BatchOffset.end_offset,
               BatchOffset.batch_id).where(BatchOffset.batch_id == batch_id))
    s.connection().execute(stmt.on_conflict_do_update(
        index_elements=["job_id", "topic", "partition"],
        set_={"next_offset": stmt.excluded.next_offset, "batch_id": stmt.excluded.batch_id,
              "updated_at": func.now()}))
    batch.committed_at = func.now()
    batch.commit_ms = func.extract("epoch", func.clock_timestamp() - func.now()) * 1000
    # the job's next commit number, under its row's lock until this transaction ends: numbers become visible
    # in order, so an announcer reading them in order never skips one
    batch.commit_no = s.execute(update(Job).where(Job.id == job.id).values(commits=Job.commits + 1)
                                .returning(Job.commits)).scalar_one()
    if spark_batch_id is not None:
        batch.spark_batch_id = spark_batch_id
    batch.rows_written = rows_written
    batch.dead_letters = dead_letters
    return True


@dataclass(frozen=True)
class StagedBatch:
    """The sink's half of a commit: it only stages and moves rows; the protocol owns the transaction.

    `move(cur)` moves exactly the staged rows of this batch into the target and returns how many landed, raising
    when staged rows are missing; the sink empties its stage after the commit (or a replay). Dead letters wait
    in `dead_letter_stage` (a table with topic, partition, "offset", _raw, _error and _sf_write_id columns;
    None when the write keeps none), marked with the batch's `write_ids`."""

    offsets: Mapping[TopicPartition, tuple[int, int]]  # lowest and highest offset staged per partition
    write_ids: Sequence[str]
    dead_letter_stage: sql.Composable | None
    move: Callable[[Any], int]


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
    """One transaction: the pending batch (the one ending at `ends`, when given), the check that the staged
    rows are its own, the sink's move, the dead letters, the offsets and the snapshot.

    Without a job the rows still move atomically, with no offsets. Two jobs moving overlapping keys into one
    table can deadlock; PostgreSQL aborts one transaction, which is whole again on retry. The locks a commit
    asks for by name wait for as long as their holders keep them (`offsets_db.locks`); one it meets inside a
    statement (a row another writer or a user holds past lock_timeout) fails that statement, and the
    transaction, rolled back whole, is tried again the same way."""
    for attempt in range(1, tries + 1):
        try:
            return _commit_once(engine, job, staged, spark_batch_id, generation, ends)
        except (DBAPIError, psycopg2.Error) as exc:
            why = next((w for kind, w in RETRIED.items() if isinstance(getattr(exc, "orig", exc), kind)), None)
            if why is None or attempt == tries:
                raise
            log.warning("job %s: commit %s, retrying (%d/%d)", job, why, attempt, tries)
            time.sleep(random.uniform(0.1, 1.0) * attempt)
    raise AssertionError("unreachable")


def _commit_once(engine: Engine, job_name: str | None, staged: StagedBatch, spark_batch_id: int | None,
                 generation: int | None, ends: Positions | None) -> Committed:
    with Session(engine) as s, s.begin():
        cur = s.connection().connection.dbapi_connection.cursor()
        if job_name is None:
            return Committed(None, staged.move(cur))
        job = resolve_job(s, job_name)
        batch_id = pending_batch(s, job, generation, ends)
        config = s.scalar(select(Job.config).where(Job.id == job.id)) or {}
        if batch_id is None:
            log.info("job %s: batch already committed (replay); staged rows dropped", job.name)
            return Committed(None, replay=True, config=config, snapshot=job_snapshot(s, job.id))
        check_offsets(s, job, batch_id, staged.offsets)
        moved = staged.move(cur)
        dead = _move_dead_letters(cur, staged, job.id, batch_id) if staged.dead_letter_stage is not None else 0
        mark_committed(s, job, batch_id, rows_written=moved, dead_letters=dead, spark_batch_id=spark_batch_id)
        s.flush()
        return Committed(batch_id, moved, dead, config=config, snapshot=job_snapshot(s, job.id))


def _move_dead_letters(cur, staged: StagedBatch, job_id: int, batch_id: int) -> int:
    """Staged rows with an _error into dead_letters, once per (job, topic, partition, offset)."""
    cur.execute(sql.SQL(schema.sql(
        'INSERT INTO {dead_letters} (job_id, batch_id, topic, partition, "offset", raw_value, error) '
        'SELECT DISTINCT ON (topic, partition, "offset") %s, %s, topic, partition, "offset", _raw, _error '
        "FROM {{}} WHERE _sf_write_id = ANY(%s) AND _error IS NOT NULL "
        'ORDER BY topic, partition, "offset" ON CONFLICT (job_id, topic, partition, "offset") DO NOTHING')).format(
        staged.dead_letter_stage), (job_id, batch_id, list(staged.write_ids)))
    return cur.rowcount


def commit_through(engine: Engine, job_name: str, end: Positions, generation: int | None = None) -> bool:
    """Commit the newest planned batch if it ends at `end`: Spark committed it and the sink did not (a sink
    other than streamfill_postgres)."""
    with Session(engine) as s, s.begin():
        job = resolve_job(s, job_name)
        current = fencing.check(s, job.name, job.id, generation, refuse_live_holder=False)
        last = last_batch(s, job.id, lock=True)
        if last is None or last.committed_at is not None:
            return False
        if last.generation is not None and last.generation != current:
            return False
        ends = {tp: e for tp, (_, e) in batch_bounds(s, last.id).items()}
        if ends != {tp: o for tp, o in end.items() if tp in ends}:
            return False
        return mark_committed(s, job, last.id)


def commit(engine: Engine, job_name: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0) -> bool:
    """`mark_committed` in a transaction of its own: for a batch whose rows another system already holds."""
    with Session(engine) as s, s.begin():
        return mark_committed(s, resolve_job(s, job_name), batch_id, rows_written, dead_letters)

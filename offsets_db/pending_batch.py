"""The batch a sink's commit finalises, found and locked inside the commit's transaction, and the check that the
rows the sink staged are that batch's."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from streamfill.errors import CheckpointMismatch, Fenced, ProtocolError
from streamfill.offsets_db import fencing
from streamfill.offsets_db.batch_reads import agrees, batch_bounds, job_snapshot, last_batch
from streamfill.offsets_db.job_lookup import ResolvedJob
from streamfill.offsets_db.locks import advisory_holders, wait_for_lock
from streamfill.offsets_db.models import Batch, BatchOffset, DataLossEvent, Job
from streamfill.partitions import Positions, TopicPartition

COMMIT_LOCK_SPACE = 0x5F13  # advisory-lock key space of a job's commits by ends: (COMMIT_LOCK_SPACE, job id)


def pending_batch(s: Session, job: ResolvedJob, generation: int | None = None,
                  ends: Positions | None = None) -> int | None:
    """Inside the sink's transaction: the job's newest planned batch (with `ends`, the newest ending exactly
    there), locked, or None when it is already committed (a replay: the sink drops its staged rows). It must
    have been planned by the launch that holds the job now (and by `generation`, the committing launch, when
    given): Fenced otherwise.

    A bounded write that names where its batch ends (the backfill's, which plans the next chunk while one is
    written) may leave a job two pending batches; their commits take a per-job advisory lock, so they run one at
    a time while the job's plans go on."""
    if ends is not None:  # a job's batches in flight commit one at a time; its plans are not held up
        # the other commit may itself wait for a lock on the table (a colleague's CREATE INDEX): wait as long
        wait_for_lock(s.connection().connection.dbapi_connection.cursor(), "SELECT pg_advisory_xact_lock(%s, %s)",
                      (COMMIT_LOCK_SPACE, job.id), what=f"job {job.name}: a commit waiting for the job's other commit",
                      holders=advisory_holders(COMMIT_LOCK_SPACE, job.id))
    current = fencing.check(s, job.name, job.id, generation, refuse_live_holder=False)
    last = last_batch(s, job.id, lock=True) if ends is None else _batch_ending_at(s, job.id, ends)
    if last is None and ends is not None:
        raise ProtocolError(f"job {job.name!r} has no planned batch ending at {_positions_text(ends)}: give the "
                            "sink the endingOffsets its source read to")
    if last is None:
        raise ProtocolError(f"job {job.name!r} has no planned batch: give the source the same job option as the "
                            "sink")
    if last.committed_at is not None:
        return None
    if last.generation is not None and last.generation != current:
        raise Fenced(f"batch {last.seq} of job {job.name!r} was planned by a launch that no longer holds the job "
                     f"(generation {last.generation}, now {current}); its rows are dropped and the holder plans "
                     "the batch again")
    if ends is not None or s.scalar(select(Job.kind).where(Job.id == job.id)) == "stream":
        # the batch starts where the job stands (docs/connectors.md), but where data loss moved
        # its start
        lost = {tuple(r) for r in s.execute(select(DataLossEvent.topic, DataLossEvent.partition)
                                            .where(DataLossEvent.batch_id == last.id))}
        begins = {tp: b for tp, (b, _) in batch_bounds(s, last.id).items() if (tp.topic, tp.partition) not in lost}
        snap = job_snapshot(s, job.id)
        if snap and not agrees(begins, snap) and ends is None:
            raise CheckpointMismatch(job.name, begins, snap)
        if snap and not agrees(begins, snap):  # a batch in flight (by ends) whose predecessor did not commit
            raise ProtocolError(f"job {job.name!r}: batch {last.seq} starts at {_positions_text(begins)}, but the "
                                f"job stands at {_positions_text({tp: snap[tp] for tp in begins if tp in snap})}: a "
                                "batch before it on those partitions has not committed. Nothing is committed; "
                                "commit that batch first")
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


def _positions_text(positions: Positions) -> str:
    """Positions for a message: `topic-partition: offset`, comma separated, in partition order."""
    return ", ".join(f"{tp.topic}-{tp.partition}: {off}" for tp, off in sorted(positions.items())) or "nothing"


def check_offsets(s: Session, job: ResolvedJob, batch_id: int,
                  staged: Mapping[TopicPartition, tuple[int, int]]) -> None:
    """The staged rows must be this batch's: per partition, their lowest and highest offset inside its range.
    Rows of another launch's batch (read from other offsets) are refused, never committed as this one."""
    bounds = batch_bounds(s, batch_id)
    for tp, (low, high) in sorted(staged.items()):
        begin, end = bounds.get(tp, (None, None))
        if begin is None or low < begin or high >= end:
            seq = s.scalar(select(Batch.seq).where(Batch.id == batch_id))
            planned = f"[{begin}, {end})" if begin is not None else "nothing of that partition"
            raise ProtocolError(f"job {job.name!r}: staged rows of {tp.topic}-{tp.partition} at offsets "
                                f"{low}..{high} are not batch {seq}'s (it planned {planned}). They were read by "
                                "another launch or another query with the same job option; nothing is committed "
                                "and the batch fails, so Spark replays it")

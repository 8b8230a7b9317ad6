"""Recording what a job's source planned, before any task reads it: each batch's ranges (a replay finds its own
batch again, and Spark's start is checked against the job's snapshot) and the data loss found while planning."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from streamfill.connectors.kafka.data_loss import DataLoss
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import CheckpointMismatch, ForeignCheckpoint
from streamfill.offsets_db import fencing
from streamfill.offsets_db.batch_commit import mark_committed
from streamfill.offsets_db.batch_reads import agrees, agrees_fully, batch_bounds, job_snapshot, last_batch
from streamfill.offsets_db.job_lookup import ResolvedJob, resolve_job
from streamfill.offsets_db.models import Batch, BatchOffset, DataLossEvent, Job
from streamfill.partitions import Positions, TopicPartition


def record_plan(engine: Engine, job_name: str, ranges: Iterable[OffsetRange], *, start: Positions | None = None,
                losses: Iterable[DataLoss] = (), spark_batch_id: int | None = None,
                run_id: int | None = None, generation: int | None = None, from_checkpoint: bool = False) -> int:
    """The batch id of this plan; planning the same ranges again (a replay) returns the same batch.

    `start` is where Spark's checkpoint says the batch starts (`from_checkpoint`: a query that resumed from an
    existing checkpoint); it must agree with the job's snapshot (CheckpointMismatch otherwise), and a
    checkpoint of another job is refused (ForeignCheckpoint). Data-loss events found while planning are stored
    with the batch.
    `generation` is the planning launch's hold on the job (`fencing.acquire`): a launch that lost the job is
    refused (Fenced); without one, only a job no live launch holds can be planned.
    """
    ranges = sorted(ranges, key=lambda r: (r.topic, r.partition))
    with Session(engine) as s, s.begin():
        job = resolve_job(s, job_name)
        s.execute(select(Job.id).where(Job.id == job.id).with_for_update())  # one planner at a time per job
        fencing.check(s, job.name, job.id, generation, refuse_live_holder=True)
        if run_id is None and generation is not None:
            run_id = fencing.run_of(s, job.id, generation)  # the launch's runs row: the offset finder's "run"
        last = last_batch(s, job.id)
        ends = {TopicPartition(r.topic, r.partition): r.end for r in ranges}
        if last is not None and _same_plan(s, last.id, ranges) and (
                last.committed_at is None or agrees_fully(ends, job_snapshot(s, job.id))):
            if last.committed_at is None and generation is not None:
                last.generation = generation  # the launch holding the job now owns its pending batch
                last.run_id = run_id
            return last.id  # a replay: before its commit, or with the job still standing at its end
        if start is not None:
            _check_start(s, job, start, last, from_checkpoint)
        seq = (s.scalar(select(func.max(Batch.seq)).where(Batch.job_id == job.id)) or 0) + 1
        behind = sum(r.log_end - r.end for r in ranges if r.log_end is not None)
        batch = Batch(job_id=job.id, seq=seq, spark_batch_id=spark_batch_id, run_id=run_id, behind=behind,
                      generation=generation)
        s.add(batch)
        s.flush()
        s.add_all([BatchOffset(batch_id=batch.id, topic=r.topic, partition=r.partition, start_offset=r.start,
                               end_offset=r.end, log_start=r.log_start, log_end=r.log_end) for r in ranges])
        s.add_all([DataLossEvent(job_id=job.id, batch_id=batch.id, topic=e.topic, partition=e.partition,
                                 kind=e.kind, lost_from=e.lost_from, lost_to=e.lost_to) for e in losses])
        return batch.id


def record_losses(engine: Engine, job_name: str, losses: Iterable[DataLoss]) -> None:
    """Data loss that fails the query (failOnDataLoss=true): recorded without a batch, before the failure."""
    with Session(engine) as s, s.begin():
        job = resolve_job(s, job_name)
        s.add_all([DataLossEvent(job_id=job.id, topic=e.topic, partition=e.partition, kind=e.kind,
                                 lost_from=e.lost_from, lost_to=e.lost_to) for e in losses])


def _same_plan(s: Session, batch_id: int, ranges: list[OffsetRange]) -> bool:
    rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                            BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)
                     .order_by(BatchOffset.topic, BatchOffset.partition)).all()
    return [tuple(r) for r in rows] == [(r.topic, r.partition, r.start, r.end) for r in ranges]


def _check_start(s: Session, job: ResolvedJob, start: Positions, last: Batch | None,
                 from_checkpoint: bool = False) -> None:
    """Spark's start must be where the job stands. A checkpoint that shows the pending batch finished while its
    sink did not commit in offsets_db commits that batch on the way."""
    snap = job_snapshot(s, job.id)
    if start and snap and not start.keys() & snap.keys():
        raise ForeignCheckpoint(job.name, start, "none of its partitions is one the job has read ("
                                + ", ".join(f"{t}-{p}" for t, p in sorted(snap)[:10]) + ")")
    if not snap:
        if not (from_checkpoint and start):
            return
        if last is not None and last.committed_at is None:
            bounds = batch_bounds(s, last.id)
            if {tp: b for tp, (b, _) in bounds.items()} == dict(start):
                return  # the job's own first batch, planned again
            if {tp: e for tp, (_, e) in bounds.items()} == {tp: o for tp, o in start.items() if tp in bounds}:
                mark_committed(s, job, last.id)  # Spark finished it; a sink other than ours left it uncommitted
                return
        raise ForeignCheckpoint(job.name, start, "the job has no committed position in offsets_db, so the "
                                "checkpoint was written by another job (or offsets_db was reset)")
    if agrees(start, snap):
        return
    if last is not None and last.committed_at is None:
        bounds = batch_bounds(s, last.id)
        begins = {tp: b for tp, (b, _) in bounds.items()}
        ends = {tp: e for tp, (_, e) in bounds.items()}
        if agrees(begins, snap) and agrees(start, ends):
            # Spark's checkpoint shows the batch completed; its sink did not commit in offsets_db
            mark_committed(s, job, last.id)
            return
    raise CheckpointMismatch(job.name, start, snap)

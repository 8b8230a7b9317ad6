"""What the exactly-once protocol reads of a job inside its transactions: its newest batch, a batch's planned
ranges, where the job stands (its snapshot), and whether two sets of positions agree."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from streamfill.offsets_db.models import Batch, BatchOffset, Snapshot
from streamfill.partitions import Positions, TopicPartition


def agrees(a: Positions, b: Positions) -> bool:
    """The same offset on every partition both name."""
    return all(a[tp] == b[tp] for tp in a.keys() & b.keys())


def agrees_fully(a: Positions, b: Positions) -> bool:
    """b has a's offset on every partition a names."""
    return all(b.get(tp) == off for tp, off in a.items())


def last_batch(s: Session, job_id: int, lock: bool = False) -> Batch | None:
    q = select(Batch).where(Batch.job_id == job_id).order_by(Batch.seq.desc()).limit(1)
    return s.scalar(q.with_for_update() if lock else q)


def batch_bounds(s: Session, batch_id: int) -> dict[TopicPartition, tuple[int, int]]:
    """The batch's planned (start, end) per partition."""
    rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                            BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)).all()
    return {TopicPartition(t, p): (b, e) for t, p, b, e in rows}


def job_snapshot(s: Session, job_id: int) -> Positions:
    """Where the job stands: the next offset per partition."""
    rows = s.execute(select(Snapshot.topic, Snapshot.partition, Snapshot.next_offset)
                     .where(Snapshot.job_id == job_id)).all()
    return {TopicPartition(t, p): o for t, p, o in rows}

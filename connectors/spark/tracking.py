"""The source's link to offsets_db (`job` option): where a stream resumes, what each batch planned, and
the commits that sinks other than `streamfill_postgres` leave to the source."""

from __future__ import annotations

import logging

from connectors.kafka.enumerator import Plan
from connectors.kafka.partitions import Positions, TopicPartition
from offsets_db.store import OffsetStore, PlannedRange

log = logging.getLogger("streamfill.tracking")


class JobTracker:
    """Driver-side only; built lazily so the reader pickles without a database connection."""

    def __init__(self, job: str, url: str, kind: str, config: dict | None = None) -> None:
        self.job, self.url, self.kind, self.config = job, url, kind, config or {}
        self._store: OffsetStore | None = None

    @property
    def store(self) -> OffsetStore:
        if self._store is None:
            self._store = OffsetStore(self.url)
            self._store.ensure_job(self.job, self.kind, self.config)
        return self._store

    def resume(self) -> Positions:
        return {TopicPartition(t, p): off for (t, p), off in self.store.snapshot(self.job).items()}

    def record(self, plan: Plan, start: Positions | None) -> int:
        """Record the plan before any task reads it; `start` (Spark's) is checked against the snapshot."""
        ranges = [PlannedRange(tp.topic, tp.partition, b, e, *plan.watermarks.get(tp, (None, None)))
                  for tp, (b, e) in sorted(plan.bounds.items())]
        return self.store.record_planned(self.job, ranges, start=None if start is None else dict(start),
                                         losses=plan.losses)

    def committed_by_spark(self, end: Positions) -> None:
        """Spark committed the batch ending at `end`; commit it here when no sink did (a no-op otherwise)."""
        if self.store.commit_through(self.job, dict(end)):
            log.info("job %s: batch ending at %s committed by the source (the sink does not commit offsets)",
                     self.job, dict(end))

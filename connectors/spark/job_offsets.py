"""The source's link to offsets_db (`job` option): where a stream resumes, what each batch planned, and
the commits that sinks other than `streamfill_postgres` leave to the source."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from streamfill.connectors.kafka import group_mirror
from streamfill.connectors.kafka.enumerator import Plan
from streamfill.connectors.kafka.options import SourceOptions
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.offsets_db.engine import shared_engine
from streamfill.offsets_db.fencing import Lease
from streamfill.offsets_db.store import OffsetStore
from streamfill.partitions import Positions

log = logging.getLogger("streamfill.tracking")


def job_config(opts: SourceOptions) -> dict:
    """What offsets_db keeps about a launch. With commitToGroup: the group and the read's client without its
    secrets (the committing process adds its own), once group_mirror.check found that the mirror will work,
    else the launch is refused here, before anything is recorded. Without it: no mirror, also for a job an
    earlier launch mirrored."""
    config: dict = {"subscription": repr(opts.subscription), "starting": repr(opts.starting),
                    "commit_to_group": None}
    if opts.commit_to_group:
        group_mirror.check(opts.commit_to_group, opts.kafka)
        config["commit_to_group"] = {"group": opts.commit_to_group, "kafka": group_mirror.kept(opts.kafka)}
    return config


def mirror_to_group(config: Mapping, positions: Positions) -> None:
    """commitToGroup: the Kafka group follows offsets_db, the source of truth. A failure is logged, not
    raised: the batch is already committed, and the next batch's mirror catches the group up. What the
    launch's configuration decides (secrets, ACLs, a group used by consumers) was checked at its start."""
    target = config.get("commit_to_group")
    if not target or not positions:
        return
    try:
        group_mirror.commit(target["kafka"], target["group"], positions)
    except Exception as exc:  # whatever failed, the batch stays committed: log it and go on
        log.warning("offsets not mirrored to consumer group %s (the batch is committed; the next batch's mirror "
                    "catches the group up): %s", target["group"], exc)


class JobTracker:
    """Driver-side only; built lazily so the reader pickles without a database connection.

    Plans carry the launch's hold on the job (docs/guarantees.md): the `jobGeneration` option when a streamfill
    job took the job before starting the query, otherwise the tracker takes it itself on first use and keeps it
    while its process lives (for a stream, the query's life)."""

    def __init__(self, job: str, url: str, kind: str, config: dict | None = None, *,
                 generation: int | None = None, wait_ms: int = 0, run_id: int | None = None) -> None:
        self.job, self.url, self.kind, self.config = job, url, kind, config or {}
        self.generation, self.wait_ms, self.run_id = generation, wait_ms, run_id
        self._store: OffsetStore | None = None
        self._lease: Lease | None = None

    @property
    def store(self) -> OffsetStore:
        if self._store is None:
            store = OffsetStore(shared_engine(self.url))  # the planning process keeps it for the next plan
            store.ensure_job(self.job, self.kind, self.config)
            if self.generation is None:
                self._lease = store.hold(self.job, wait_s=self.wait_ms / 1000, run_id=self.run_id,
                                         wait_hint="set the source option waitForJob, e.g. 10m",
                                         on_wait=lambda h: log.warning("job %s: waiting for %s", self.job,
                                                                       h.describe()))
                self.generation = self._lease.generation
            self._store = store
        return self._store

    def release(self) -> None:
        """Give the job back (a bounded read once its plan is recorded, a stream when its query stops): Spark may
        keep this Python process for later work, and a lease must not outlive its query."""
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def record_losses(self, losses) -> None:
        """Data loss that fails the query (failOnDataLoss=true) is recorded before the failure."""
        self.store.record_losses(self.job, losses)

    def resume(self) -> Positions:
        """The snapshot; for a job that never committed, where its first planned batch began."""
        return self.store.snapshot(self.job) or self.store.first_start(self.job)

    def pin_start(self, start: Positions) -> None:
        """A stream that starts elsewhere than at earliest keeps that start in offsets_db from its first launch."""
        if self.store.pin_start(self.job, dict(start), self.generation):
            log.info("job %s starts at %s", self.job, dict(start))

    def record(self, plan: Plan, start: Positions | None, from_checkpoint: bool = False) -> int:
        """Record the plan before any task reads it; `start` (Spark's, read from an existing checkpoint when
        `from_checkpoint`) is checked against the snapshot."""
        ranges = [OffsetRange(tp.topic, tp.partition, b, e, *plan.watermarks.get(tp, (None, None)))
                  for tp, (b, e) in sorted(plan.bounds.items())]
        store = self.store
        return store.record_planned(self.job, ranges, start=None if start is None else dict(start),
                                    losses=plan.losses, generation=self.generation, from_checkpoint=from_checkpoint)

    def committed_by_spark(self, end: Positions) -> None:
        """Spark committed the batch ending at `end`; commit it here when no sink did (a no-op otherwise)."""
        if self.store.commit_through(self.job, dict(end), self.generation):
            log.info("job %s: batch ending at %s committed by the source (the sink does not commit offsets)",
                     self.job, dict(end))
        mirror_to_group(self.config, self.store.snapshot(self.job))

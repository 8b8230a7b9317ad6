"""The API the connector and the jobs use: jobs and their kinds, runs, totals, and the exactly-once protocol's
steps (implemented in `offsets_db.plans`, `offsets_db.batch_commit` and `offsets_db.resume`).

Every write is one transaction; SQL is built by SQLAlchemy with bound parameters only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from streamfill.connectors.kafka.data_loss import DataLoss
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import CheckpointMismatch, JobKindMismatch
from streamfill.names import validate_job_name
from streamfill.offsets_db import batch_commit, fencing, plans, pooling, resume
from streamfill.offsets_db.engine import make_engine
from streamfill.offsets_db.fencing import Holder, Lease
from streamfill.offsets_db.job_lookup import resolve_job
from streamfill.offsets_db.models import Batch, Job, QualityResult, Run, Snapshot
from streamfill.partitions import Positions

__all__ = ["OffsetStore", "CheckpointMismatch", "JobKindMismatch"]


class OffsetStore:
    def __init__(self, url: str | Engine) -> None:
        self.engine = url if isinstance(url, Engine) else make_engine(url)
        self._sessions_checked = False

    def _require_sessions(self) -> None:
        """A launch's first step in offsets_db, before it records anything: PoolingRefused when offsets_db is
        reached through a pooler its job's hold cannot live behind (offsets_db.pooling); asked once per store."""
        if not self._sessions_checked:
            pooling.require_session(self.engine)
            self._sessions_checked = True

    def check_grants(self) -> None:
        """RevisionMismatch unless offsets_db is at this code's migration revision (offsets_db.revision), then
        MissingGrant unless this role may use it as a job does (offsets_db.grants)."""
        from streamfill.offsets_db import grants, revision

        raw = self.engine.raw_connection()
        try:
            with raw.cursor() as cur:
                revision.check(cur)
                grants.check_job_role(cur)
        finally:
            raw.close()

    def ensure_job(self, name: str, kind: str, config: dict[str, Any] | None = None, *,
                   restart: bool = False) -> int:
        """Create the job on its first launch; every launch merges its configuration into the stored one
        (top-level keys it gives replace the old ones, others stay). A name keeps the kind it was created with:
        a backfill must never move a stream's snapshot. `restart` forgets where a bounded job stands (its
        snapshot, not its history) in the same transaction, so a new plan and old progress never mix."""
        validate_job_name(name)
        self._require_sessions()
        with Session(self.engine) as s, s.begin():
            stmt = insert(Job).values(name=name, kind=kind, config=config or {})
            s.execute(stmt.on_conflict_do_update(index_elements=[Job.name],
                                                 set_={"config": Job.config.op("||")(stmt.excluded.config)}))
            job_id, stored = s.execute(select(Job.id, Job.kind).where(Job.name == name)).one()
            if (stored == "stream") != (kind == "stream"):  # backfill and interval jobs are both bounded
                raise JobKindMismatch(f"job {name!r} is a {stored} job in offsets_db, not a {kind}; its offsets "
                                      f"belong to that {stored}. Give this {kind} its own job name")
            if restart:
                s.execute(delete(Snapshot).where(Snapshot.job_id == job_id))
            return job_id

    def hold(self, job: str, *, wait_s: float = 0, wait_hint: str = "",
             on_wait: Callable[[Holder], None] | None = None, run_id: int | None = None) -> Lease:
        """Take the job for this launch (docs/guarantees.md): JobBusy names the launch holding it, unless it ends
        within `wait_s`. Keep the lease for the launch's life; plans and commits carry its generation."""
        self._require_sessions()
        with Session(self.engine) as s:
            job_id = resolve_job(s, job).id
        return fencing.acquire(self.engine, job, job_id, wait_s=wait_s, wait_hint=wait_hint, on_wait=on_wait,
                               run_id=run_id)

    def start_run(self, job: str, *, dag_id: str | None = None, airflow_run_id: str | None = None,
                  spark_app_id: str | None = None, lease: Lease | None = None, lineage_run_id: str | None = None,
                  on_lost: Callable[[list[str]], None] | None = None, spark_remote: str | None = None,
                  spark_session_id: str | None = None) -> int:
        """One row per launch, so offsets_db shows who ran what when, where (host and pid) and for which Airflow
        run (and, `lineage_run_id`, as which OpenLineage run).

        Called by the launch holding the job (`hold`): launches still marked running were killed before they
        could say so (SIGKILL, a lost machine) and become `lost`; `on_lost` gets their OpenLineage run ids."""
        with Session(self.engine) as s, s.begin():
            job_id = resolve_job(s, job).id
            lost = s.scalars(update(Run).where(Run.job_id == job_id, Run.status == "running")
                             .values(status="lost", ended_at=func.now()).returning(Run.lineage_run_id)).all()
            run = Run(job_id=job_id, dag_id=dag_id, airflow_run_id=airflow_run_id, host=socket.gethostname(),
                      pid=os.getpid(), spark_app_id=spark_app_id, status="running", lineage_run_id=lineage_run_id,
                      spark_remote=spark_remote, spark_session_id=spark_session_id)
            s.add(run)
            s.flush()
            run_id = run.id
        if lease is not None:
            lease.set_run(run_id)
        if on_lost is not None and any(lost):
            on_lost([str(r) for r in lost if r is not None])
        return run_id

    def set_query(self, run_id: int, query_id: object) -> None:
        """The streaming query a detached launch started (a Spark Connect server's), so a later process finds it."""
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is not None:
                run.query_id = str(query_id)

    def end_run(self, run_id: int, status: str) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is not None:
                run.status, run.ended_at = status, func.now()

    def job_kind(self, name: str) -> str | None:
        with Session(self.engine) as s:
            return s.scalar(select(Job.kind).where(Job.name == validate_job_name(name)))

    def job_config(self, name: str) -> dict[str, Any]:
        with Session(self.engine) as s:
            return s.scalar(select(Job.config).where(Job.name == validate_job_name(name))) or {}

    def forget_jobs(self, names: Iterable[str]) -> list[str]:
        """Delete these jobs and everything offsets_db keeps of them, in one transaction; returns the names it
        removed, sorted (a name never recorded is skipped). Their quality results are deleted first: that key is
        SET NULL, so they would otherwise stay behind, belonging to no job; every other table cascades."""
        wanted = sorted({validate_job_name(n) for n in names})
        if not wanted:
            return []
        with Session(self.engine) as s, s.begin():
            found = dict(s.execute(select(Job.id, Job.name).where(Job.name.in_(wanted))).tuples().all())
            if found:
                s.execute(delete(QualityResult).where(QualityResult.job_id.in_(list(found))),
                          execution_options={"synchronize_session": False})
                s.execute(delete(Job).where(Job.id.in_(list(found))), execution_options={"synchronize_session": False})
        return sorted(found.values())

    # the exactly-once protocol's steps, for callers that hold a store

    def record_planned(self, job: str, ranges: Iterable[OffsetRange], *, start: Positions | None = None,
                       losses: Iterable[DataLoss] = (), spark_batch_id: int | None = None,
                       run_id: int | None = None, generation: int | None = None,
                       from_checkpoint: bool = False) -> int:
        return plans.record_plan(self.engine, job, ranges, start=start, losses=losses,
                                 spark_batch_id=spark_batch_id, run_id=run_id, generation=generation,
                                 from_checkpoint=from_checkpoint)

    def record_losses(self, job: str, losses: Iterable[DataLoss]) -> None:
        plans.record_losses(self.engine, job, losses)

    def commit(self, job: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0) -> bool:
        return batch_commit.commit(self.engine, job, batch_id, rows_written, dead_letters)

    def commit_through(self, job: str, end: Positions, generation: int | None = None) -> bool:
        return batch_commit.commit_through(self.engine, job, end, generation)

    def first_start(self, job: str) -> Positions:
        return resume.first_start(self.engine, job)

    def pin_start(self, job: str, start: Positions, generation: int | None = None) -> bool:
        return resume.pin_start(self.engine, job, start, generation)

    def snapshot(self, job: str) -> Positions:
        """The resume state: next offset per (topic, partition); empty for a job never committed."""
        return resume.resume_state(self.engine, job)

    def batch_totals(self, job: str, since_batch: int = 0) -> tuple[int, int, int]:
        """(committed batches, rows written, dead letters) of the job's batches with id > since_batch."""
        with Session(self.engine) as s:
            row = s.execute(select(func.count(Batch.id), func.coalesce(func.sum(Batch.rows_written), 0),
                                   func.coalesce(func.sum(Batch.dead_letters), 0))
                            .join(Job, Job.id == Batch.job_id)
                            .where(Job.name == validate_job_name(job), Batch.id > since_batch,
                                   Batch.committed_at.is_not(None))).one()
            return int(row[0]), int(row[1]), int(row[2])

    def last_batch_id(self, job: str) -> int:
        with Session(self.engine) as s:
            return s.scalar(select(func.coalesce(func.max(Batch.id), 0)).join(Job, Job.id == Batch.job_id)
                            .where(Job.name == validate_job_name(job))) or 0

"""The API the connector and the jobs use to record plans, commit batches and resume.

Every write is one transaction; SQL is built by SQLAlchemy with bound parameters only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import BigInteger, Engine, create_engine, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from offsets_db.models import Batch, BatchOffset, DataLossEvent, Job, Run, Snapshot
from offsets_db.names import validate_job_name



Positions = dict[tuple[str, int], int]  # next offset per (topic, partition)


class CheckpointMismatch(RuntimeError):
    """Spark's checkpoint and offsets_db disagree on where a job stands; neither is silently trusted."""

    def __init__(self, job: str, checkpoint: Positions, snapshot: Positions) -> None:
        self.job, self.checkpoint, self.snapshot = job, checkpoint, snapshot
        differ = sorted(tp for tp in checkpoint.keys() & snapshot.keys() if checkpoint[tp] != snapshot[tp])
        shown = ", ".join(f"{t}-{p}: checkpoint {checkpoint[(t, p)]}, offsets_db {snapshot[(t, p)]}"
                          for t, p in differ[:10])
        super().__init__(
            f"the Spark checkpoint of job {job!r} disagrees with offsets_db ({shown}). offsets_db holds what "
            "was committed to the sink. To resume from offsets_db, delete the checkpoint directory and restart; "
            "to start this checkpoint's position as a new history, use a new job name.")


def _agrees(a: Positions, b: Positions) -> bool:
    return all(a[tp] == b[tp] for tp in a.keys() & b.keys())


def _agrees_fully(a: Positions, b: Positions) -> bool:
    return all(b.get(tp) == off for tp, off in a.items())


class JobKindMismatch(ValueError):
    """A job name used for another kind of job (a backfill under a stream's name)."""


class LossRecord(Protocol):
    """A data-loss event as the connector reports it (`connectors.kafka.errors.DataLoss`)."""

    topic: str
    partition: int
    kind: str
    lost_from: int
    lost_to: int


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

    def ensure_job(self, name: str, kind: str, config: dict[str, Any] | None = None, *,
                   restart: bool = False) -> int:
        """Create the job on its first launch; every launch merges its configuration into the stored one
        (top-level keys it gives replace the old ones, others stay). A name keeps the kind it was created with:
        a backfill must never move a stream's snapshot. `restart` forgets where a bounded job stands (its
        snapshot, not its history) in the same transaction, so a new plan and old progress never mix."""
        validate_job_name(name)
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

    def start_run(self, job: str, *, dag_id: str | None = None, airflow_run_id: str | None = None,
                  spark_app_id: str | None = None) -> int:
        """One row per launch, so offsets_db shows who ran what when (Airflow's ids when it launched it).

        A job runs one launch at a time: launches still marked running were killed before they could say so
        (SIGKILL, a lost machine) and become `lost`."""
        with Session(self.engine) as s, s.begin():
            job_id = self._job_id(s, job)
            s.execute(update(Run).where(Run.job_id == job_id, Run.status == "running")
                      .values(status="lost", ended_at=func.now()))
            run = Run(job_id=job_id, dag_id=dag_id, airflow_run_id=airflow_run_id,
                      spark_app_id=spark_app_id, status="running")
            s.add(run)
            s.flush()
            return run.id

    def end_run(self, run_id: int, status: str) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is not None:
                run.status, run.ended_at = status, func.now()

    def job_kind(self, name: str) -> str | None:
        with Session(self.engine) as s:
            return s.scalar(select(Job.kind).where(Job.name == validate_job_name(name)))

    def job_config(self, name: str, session: Session | None = None) -> dict[str, Any]:
        if session is None:
            with Session(self.engine) as s:
                return self.job_config(name, s)
        return session.scalar(select(Job.config).where(Job.name == validate_job_name(name))) or {}

    def job_id(self, name: str, session: Session) -> int:
        return self._job_id(session, name)

    def _job_id(self, s: Session, name: str) -> int:
        job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(name)))
        if job_id is None:
            raise LookupError(f"job {name!r} is not in offsets_db; it is created by its first run")
        return job_id

    def record_planned(self, job: str, ranges: Iterable[PlannedRange], *, start: Positions | None = None,
                       losses: Iterable[LossRecord] = (), spark_batch_id: int | None = None,
                       run_id: int | None = None) -> int:
        """The batch id of this plan; planning the same ranges again (a replay) returns the same batch.

        `start` is where Spark's checkpoint says the batch starts; it must agree with the job's snapshot
        (CheckpointMismatch otherwise). Data-loss events found while planning are stored with the batch.
        """
        ranges = sorted(ranges, key=lambda r: (r.topic, r.partition))
        with Session(self.engine) as s, s.begin():
            job_id = self._job_id(s, job)
            s.execute(select(Job.id).where(Job.id == job_id).with_for_update())  # one planner at a time per job
            last = self._last_batch(s, job_id)
            if last is not None and self._same_plan(s, last.id, ranges) and (
                    last.committed_at is None or _agrees_fully({(r.topic, r.partition): r.end for r in ranges},
                                                              self._snapshot(s, job_id))):
                return last.id  # a replay: before its commit, or with the job still standing at its end
            if start is not None:
                self._check_start(s, job, job_id, start, last)
            seq = (s.scalar(select(func.max(Batch.seq)).where(Batch.job_id == job_id)) or 0) + 1
            behind = sum(r.log_end - r.end for r in ranges if r.log_end is not None)
            batch = Batch(job_id=job_id, seq=seq, spark_batch_id=spark_batch_id, run_id=run_id, behind=behind)
            s.add(batch)
            s.flush()
            s.add_all([BatchOffset(batch_id=batch.id, topic=r.topic, partition=r.partition, start_offset=r.start,
                                   end_offset=r.end, log_start=r.log_start, log_end=r.log_end) for r in ranges])
            s.add_all([DataLossEvent(job_id=job_id, batch_id=batch.id, topic=e.topic, partition=e.partition,
                                     kind=e.kind, lost_from=e.lost_from, lost_to=e.lost_to) for e in losses])
            return batch.id

    def _check_start(self, s: Session, job: str, job_id: int, start: Positions, last: Batch | None) -> None:
        snap = self._snapshot(s, job_id)
        if not snap or _agrees(start, snap):
            return
        if last is not None and last.committed_at is None:
            bounds = self._bounds(s, last.id)
            begins = {tp: b for tp, (b, _) in bounds.items()}
            ends = {tp: e for tp, (_, e) in bounds.items()}
            if _agrees(begins, snap) and _agrees(start, ends):
                # Spark's checkpoint shows the batch completed; its sink did not commit in offsets_db
                self.commit(job, last.id, session=s)
                return
        raise CheckpointMismatch(job, start, snap)

    @staticmethod
    def _last_batch(s: Session, job_id: int, lock: bool = False) -> Batch | None:
        q = select(Batch).where(Batch.job_id == job_id).order_by(Batch.seq.desc()).limit(1)
        return s.scalar(q.with_for_update() if lock else q)

    @staticmethod
    def _bounds(s: Session, batch_id: int) -> dict[tuple[str, int], tuple[int, int]]:
        rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                                BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)).all()
        return {(t, p): (b, e) for t, p, b, e in rows}

    @staticmethod
    def _same_plan(s: Session, batch_id: int, ranges: list[PlannedRange]) -> bool:
        rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                                BatchOffset.end_offset).where(BatchOffset.batch_id == batch_id)
                         .order_by(BatchOffset.topic, BatchOffset.partition)).all()
        return [tuple(r) for r in rows] == [(r.topic, r.partition, r.start, r.end) for r in ranges]

    def commit(self, job: str, batch_id: int, rows_written: int = 0, dead_letters: int = 0,
               session: Session | None = None, spark_batch_id: int | None = None) -> bool:
        """Mark the batch committed and move the job's snapshot to its ends, atomically.

        False when the batch was already committed (a replay): nothing changes. Pass `session` to commit
        inside a transaction that also moves the batch's rows.
        """
        if session is None:
            with Session(self.engine) as s, s.begin():
                return self.commit(job, batch_id, rows_written, dead_letters, session=s,
                                   spark_batch_id=spark_batch_id)
        s = session
        job_id = self._job_id(s, job)
        batch = s.scalar(select(Batch).where(Batch.id == batch_id, Batch.job_id == job_id).with_for_update())
        if batch is None:
            raise LookupError(f"batch {batch_id} of job {job!r} was never planned")
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
        if spark_batch_id is not None:
            batch.spark_batch_id = spark_batch_id
        batch.rows_written = rows_written
        batch.dead_letters = dead_letters
        return True

    def pending_batch(self, job: str, session: Session) -> int | None:
        """The sink's half of the commit protocol, inside the sink's transaction: the job's newest planned
        batch, locked, or None when it is already committed (a replay: the sink drops its staged rows)."""
        job_id = self._job_id(session, job)
        last = self._last_batch(session, job_id, lock=True)
        if last is None:
            raise LookupError(f"job {job!r} has no planned batch: give the source the same job option as the sink")
        if last.committed_at is not None:
            return None
        if session.scalar(select(Job.kind).where(Job.id == job_id)) == "stream":
            begins = {tp: b for tp, (b, _) in self._bounds(session, last.id).items()}
            snap = self._snapshot(session, job_id)
            if snap and not _agrees(begins, snap):
                raise CheckpointMismatch(job, begins, snap)
        return last.id

    def commit_through(self, job: str, end: Positions) -> bool:
        """Commit the newest planned batch if it ends at `end` (Spark committed it; the sink did not)."""
        with Session(self.engine) as s, s.begin():
            job_id = self._job_id(s, job)
            last = self._last_batch(s, job_id, lock=True)
            if last is None or last.committed_at is not None:
                return False
            ends = {tp: e for tp, (_, e) in self._bounds(s, last.id).items()}
            if ends != {tp: o for tp, o in end.items() if tp in ends}:
                return False
            return self.commit(job, last.id, session=s)

    @staticmethod
    def _snapshot(s: Session, job_id: int) -> Positions:
        rows = s.execute(select(Snapshot.topic, Snapshot.partition, Snapshot.next_offset)
                         .where(Snapshot.job_id == job_id)).all()
        return {(t, p): o for t, p, o in rows}

    def snapshot(self, job: str) -> dict[tuple[str, int], int]:
        """The resume state: next offset per (topic, partition); empty for a job never committed."""
        with Session(self.engine) as s:
            job_id = s.scalar(select(Job.id).where(Job.name == validate_job_name(job)))
            return {} if job_id is None else self._snapshot(s, job_id)

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

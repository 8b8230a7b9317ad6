"""The tables of offsets_db as SQLAlchemy 2 typed models. Views are in `views.py`."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

PLACEHOLDER = "streamfill_offsets_db_placeholder"  # the models' schema, translated by every engine: offsets_db.schema


class Base(DeclarativeBase):
    metadata = MetaData(schema=PLACEHOLDER)
    type_annotation_map = {dict[str, Any]: JSONB, datetime: DateTime(timezone=True)}


class Job(Base):
    """One per job name: a stream, a backfill or an interval job, with its configuration."""

    __tablename__ = "jobs"
    __table_args__ = (CheckConstraint("kind IN ('stream', 'backfill', 'interval')", name="jobs_kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    commits: Mapped[int] = mapped_column(BigInteger, server_default="0")  # the last commit_no taken


class Run(Base):
    """One per launch; Airflow's dag_id and run_id when Airflow launched it."""

    __tablename__ = "runs"
    __table_args__ = (Index("runs_job_newest", "job_id", "id"), Index("ix_runs_job_id", "job_id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    dag_id: Mapped[str | None] = mapped_column(String(250))
    airflow_run_id: Mapped[str | None] = mapped_column(String(250))
    spark_app_id: Mapped[str | None] = mapped_column(String(250))
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None]
    status: Mapped[str] = mapped_column(String(16), default="running")
    started_at: Mapped[datetime] = mapped_column(server_default=func.now())
    ended_at: Mapped[datetime | None]
    lineage_run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))  # its OpenLineage runId
    # a detached stream's driver: the Spark Connect server (no credentials), its session and its query
    spark_remote: Mapped[str | None] = mapped_column(String(250))
    spark_session_id: Mapped[str | None] = mapped_column(String(64))
    query_id: Mapped[str | None] = mapped_column(String(64))


class Batch(Base):
    """One per planned range of a job: planned before reading, committed with its rows and snapshot."""

    __tablename__ = "batches"
    __table_args__ = (UniqueConstraint("job_id", "seq", name="batches_job_seq"),
                      UniqueConstraint("job_id", "commit_no", name="batches_job_commit_no"),
                      Index("batches_job_committed", "job_id", "committed_at"),
                      Index("batches_job_planned", "job_id", "planned_at"),
                      Index("batches_run", "run_id"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    spark_batch_id: Mapped[int | None] = mapped_column(BigInteger)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    planned_at: Mapped[datetime] = mapped_column(server_default=func.now())
    committed_at: Mapped[datetime | None]
    rows_written: Mapped[int | None] = mapped_column(BigInteger)
    dead_letters: Mapped[int | None] = mapped_column(BigInteger)
    behind: Mapped[int | None] = mapped_column(BigInteger)  # sum over partitions of log_end - end at planning
    generation: Mapped[int | None] = mapped_column(BigInteger)  # the lease generation of the launch that planned it
    # the job's 1st, 2nd, ... commit: taken in the commit's transaction, gap-free, the outbox of announcements
    commit_no: Mapped[int | None] = mapped_column(BigInteger)
    commit_ms: Mapped[float | None]  # the commit's transaction up to marking this batch (rows and dead letters moved)


class JobLease(Base):
    """Who holds a job (docs/guarantees.md): one launch at a time plans and commits. The
    holder keeps a session-level
    advisory lock for its whole life; each acquisition bumps `generation`, and every plan and commit checks
    its launch's generation in its own transaction, so a launch that lost the job can never write for it."""

    __tablename__ = "job_leases"
    __table_args__ = (Index("job_leases_run", "run_id"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int]
    backend_pid: Mapped[int]  # the PostgreSQL session holding the advisory lock
    acquired_at: Mapped[datetime] = mapped_column(server_default=func.now())


class BatchOffset(Base):
    """Per batch and partition: [start, end) and the broker's log-start and log-end when it was planned."""

    __tablename__ = "batch_offsets"
    __table_args__ = (Index("batch_offsets_tp_range", "topic", "partition", "start_offset", "end_offset"),)

    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    log_start: Mapped[int | None] = mapped_column(BigInteger)
    log_end: Mapped[int | None] = mapped_column(BigInteger)


class Snapshot(Base):
    """Resume state: the next offset per (job, topic, partition), written in the commit transaction."""

    __tablename__ = "snapshots"
    __table_args__ = (Index("snapshots_batch", "batch_id"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class DataLossEvent(Base):
    __tablename__ = "data_loss_events"
    __table_args__ = (Index("ix_data_loss_events_job_id", "job_id"), Index("data_loss_events_batch", "batch_id"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"))
    topic: Mapped[str] = mapped_column(String(249))
    partition: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(40))
    lost_from: Mapped[int] = mapped_column(BigInteger)
    lost_to: Mapped[int] = mapped_column(BigInteger)
    detected_at: Mapped[datetime] = mapped_column(server_default=func.now())


class DeadLetter(Base):
    """A record that could not be parsed or validated, with where it came from and why."""

    __tablename__ = "dead_letters"
    __table_args__ = (UniqueConstraint("job_id", "topic", "partition", "offset", name="dead_letters_key"),
                      Index("dead_letters_job_created", "job_id", "created_at"),
                      Index("dead_letters_batch", "batch_id"))  # each batch deleted sets its batch_id to null

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"))
    topic: Mapped[str] = mapped_column(String(249))
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    raw_value: Mapped[bytes | None] = mapped_column(LargeBinary)
    error: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class QualityResult(Base):
    """One Great Expectations validation of a sink table: its verdict, statistics and full result."""

    __tablename__ = "quality_results"
    __table_args__ = (Index("quality_results_job_checked", "job_id", "checked_at"),
                      Index("ix_quality_results_job_id", "job_id"), Index("quality_results_run", "run_id"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    suite: Mapped[str] = mapped_column(String(200))
    table_name: Mapped[str] = mapped_column(String(200))
    success: Mapped[bool] = mapped_column(Boolean)
    statistics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    checked_at: Mapped[datetime] = mapped_column(server_default=func.now())


class Announcement(Base):
    """One asset event announcing a stream's commits `first_commit`..`last_commit` (their `batches.commit_no`).
    Formed with its extra and token before delivery; `airflow_event_id` once Airflow stored it. The newest
    `last_commit` of a job is where its announcer stands."""

    __tablename__ = "announcements"
    __table_args__ = (CheckConstraint("first_commit <= last_commit", name="announcements_commits_ordered"),
                      UniqueConstraint("job_id", "seq", name="announcements_job_seq"),
                      UniqueConstraint("job_id", "first_commit", name="announcements_job_first_commit"),
                      Index("announcements_one_pending", "job_id", unique=True,
                            postgresql_where=text("delivered_at IS NULL")))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    token: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), unique=True)
    first_commit: Mapped[int] = mapped_column(BigInteger)
    last_commit: Mapped[int] = mapped_column(BigInteger)
    partition_key: Mapped[str] = mapped_column(String(250))
    extra: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    attempts: Mapped[int] = mapped_column(server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
    airflow_event_id: Mapped[int | None] = mapped_column(BigInteger)
    delivered_at: Mapped[datetime | None]


class RetentionHorizon(Base):
    """Per job, the commit time before which `streamfill db prune` may have removed its dead letters and its
    batches: reconciliations of the whole table start there (offsets_db/reconcile.py)."""

    __tablename__ = "retention_horizons"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    dead_letters_before: Mapped[datetime | None]
    history_before: Mapped[datetime | None]
    pruned_at: Mapped[datetime] = mapped_column(server_default=func.now())


class DeletedKey(Base):
    """A key a delete removed from a table (a tombstone, a change event's `d`), with the version of the record
    that deleted it: an older version of the key, replayed later, is refused as a newer version would refuse it,
    so a replay never brings a deleted row back. One row per (table, key), the newest delete kept."""

    __tablename__ = "deleted_keys"
    __table_args__ = (Index("deleted_keys_job", "job_id"),)  # a job deleted sets its deletes' job_id to null

    target: Mapped[str] = mapped_column(Text, primary_key=True)  # the table as schema.table
    key: Mapped[list[Any]] = mapped_column(JSONB, primary_key=True)  # the key's values, in the key's order
    # the declared version as a number: a source position, a version column's value, a time as its epoch
    version: Mapped[Decimal | None] = mapped_column(Numeric)
    kafka_timestamp: Mapped[datetime | None]
    topic: Mapped[str] = mapped_column(Text)
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    deleted_at: Mapped[datetime] = mapped_column(server_default=func.now())

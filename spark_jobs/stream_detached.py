"""A stream whose driver is a Spark Connect server's, detached from its launch (docs/airflow.md, "Streams off the
Airflow workers"). The launch checks what every launch checks, takes the job to prepare the table under its hold,
records its `runs` row with the server, the Connect session and the query, starts the query and leaves. The
query's source takes the job on the server for the query's life (its lease names the run), so offsets_db shows a
detached stream alive exactly while its query runs. A later process finds the query again by the run's session
and query ids: to see it, or to stop it between batches.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sqlalchemy import select

from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs.launch_args import wait_seconds
from streamfill.spark_jobs.stream_args import StreamArgs
from streamfill.spark_jobs.stream_query import check_access, check_start, query_plan, start
from streamfill.urls import without_password


@dataclass(frozen=True)
class DetachedRun:
    """Where a detached stream runs: its `runs` row, the server, the Connect session and the query."""

    job: str
    run_id: int
    remote: str
    session_id: str
    query_id: str

    def describe(self) -> str:
        return (f"stream {self.job} runs detached on {without_password(self.remote)} (run {self.run_id}, session "
                f"{self.session_id}, query {self.query_id})")


def start_detached(args: StreamArgs, remote: str, kafka: Mapping[str, str], url: str,
                   origin: Mapping[str, str | None] | None = None) -> DetachedRun:
    """Check, prepare the table under the job's hold, record the run and start the query on `remote`; returns at
    once, the query running on. `origin`: Airflow's dag_id and run_id of the launching task. Each launch has a
    session of its own: a session once released cannot be named again."""
    from streamfill.spark_jobs.session import connect_session

    session_id = str(uuid.uuid4())
    spark = connect_session(remote, session_id)
    check_access(args, kafka)
    check_start(args, kafka, url)
    query_plan(spark, args, kafka, url, change=False)
    store = OffsetStore(url)
    try:
        store.ensure_job(args.job, "stream")
        with store.hold(args.job, wait_s=wait_seconds(args.wait_for_job), wait_hint="--wait-for-job 10m") as lease:
            query_plan(spark, args, kafka, url, lease.generation)  # the table created or changed under the hold
            run_id = store.start_run(args.job, dag_id=(origin or {}).get("dag_id"),
                                     airflow_run_id=(origin or {}).get("run_id"),
                                     spark_app_id=spark.conf.get("spark.app.id", None), lease=lease,
                                     spark_remote=without_password(remote), spark_session_id=session_id)
        # a checkpoint of its own: offsets_db says where the query starts, and no older query's checkpoint can
        # disagree with it
        running = replace(args, checkpoint=f"{str(args.checkpoint).rstrip('/')}/{session_id}")
        plan = query_plan(spark, running, kafka, url, change=False, source={kafka_source.JOB_RUN.key: str(run_id)})
        query = start(spark, running, kafka, url, plan)
        store.set_query(run_id, query.id)
    finally:
        store.engine.dispose()
    return DetachedRun(args.job, run_id, remote, session_id, str(query.id))


def newest(url: str, job: str) -> DetachedRun | None:
    """The job's newest detached run that has not ended, if any."""
    from sqlalchemy.orm import Session

    from streamfill.offsets_db.job_lookup import resolve_job
    from streamfill.offsets_db.models import Run

    store = OffsetStore(url)
    try:
        with Session(store.engine) as s:
            job_id = resolve_job(s, job).id
            row = s.execute(select(Run.id, Run.spark_remote, Run.spark_session_id, Run.query_id).where(
                Run.job_id == job_id, Run.query_id.is_not(None), Run.status == "running").order_by(
                Run.id.desc()).limit(1)).first()
    finally:
        store.engine.dispose()
    return None if row is None else DetachedRun(job, row[0], row[1], row[2], row[3])


def query_of(run: DetachedRun, remote: str | None = None):
    """The run's query, looked up on its server in its session (the server's address `remote` when the stored
    one has no credentials it needs); None when the server no longer knows it (restarted, or the query ended)."""
    from pyspark.errors import PySparkException

    from streamfill.spark_jobs.session import connect_session

    spark = connect_session(remote or run.remote, run.session_id)
    try:
        return spark.streams.get(run.query_id)
    except PySparkException:
        return None


def stop_detached(url: str, job: str, grace_s: float, remote: str | None = None,
                  status: str = "stopped") -> DetachedRun | None:
    """Stop the job's detached query between batches (its batch in flight commits first); None when no detached
    run of the job is running. The run ends `status` first, so its supervision, seeing the query gone, knows it
    was asked for (`stopped`: not started again)."""
    from streamfill.spark_jobs.stream_stop import stop_between_batches

    run = newest(url, job)
    if run is None:
        return None
    store = OffsetStore(url)
    try:
        store.end_run(run.run_id, status)
    finally:
        store.engine.dispose()
    query = query_of(run, remote)
    if query is not None and query.isActive:
        stop_between_batches(query, grace_s)
    return run


def run_status(url: str, run_id: int) -> str | None:
    """The status of a `runs` row (None when there is none)."""
    from sqlalchemy.orm import Session

    from streamfill.offsets_db.models import Run

    store = OffsetStore(url)
    try:
        with Session(store.engine) as s:
            return s.scalar(select(Run.status).where(Run.id == run_id))
    finally:
        store.engine.dispose()

"""The long-running stream (`streamfill stream`): Kafka, parse and validate, valid rows and dead letters into
Postgres in one exactly-once batch commit.

Stopping: SIGTERM (or Ctrl-C) to the driver's Python process lets the batch in flight finish, then stops the
query between batches. The job resumes where offsets_db says it stands, with or without its checkpoint.

While it runs, the stream follows its entry (`entry_watch`): a new optional column, a safely widened type or a
column's rules apply between two batches without a restart; a change of what rows are or where they go stops it,
naming the fix; the rest applies at the next launch (`entry_changes`).

    spark-submit spark_jobs/stream.py --job orders --topic orders --table orders_events --trigger 5s
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streamfill.console import console, refusals
from streamfill.errors import StreamfillError
from streamfill.offsets_db.engine import reaching
from streamfill.offsets_db.store import OffsetStore
from streamfill.settings import STOP_WITH_ENV, get_settings
from streamfill.spark_jobs.entry_watch import EntryWatch
from streamfill.spark_jobs.job_flags import submit_main
from streamfill.spark_jobs.launch_args import wait_seconds
from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.spark_jobs.run_record import recorded_run
from streamfill.spark_jobs.stream_args import StreamArgs
from streamfill.spark_jobs.stream_checkpoint import refused_checkpoint, set_checkpoint_aside, without_jvm_stack
from streamfill.spark_jobs.stream_query import check_access, check_start, query_plan, start, stream_lineage_io
from streamfill.spark_jobs.stream_stop import StopGrace, stop_between_batches, watch_task
from streamfill.spark_jobs.telemetry import JobMetrics, exporters, job_metrics


@dataclass
class StreamSummary:
    job: str
    status: str
    batches: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0


def run(args: StreamArgs, spark, kafka: Mapping[str, str], url: str, stop: threading.Event,
        on_batch: Callable[[dict], None] | None = None, stopped: Callable[[], object] = lambda: None) -> StreamSummary:
    """Run until the query ends (AvailableNow) or `stop` is set; then stop between batches. `stopped` is told
    once the query has stopped, before the launch records its end (it ends a stop's grace timer).

    Everything is checked first (the cluster's login and the topics' ACLs, then the table); then the launch
    takes the job (refused, or waiting with --wait-for-job, while another launch holds it) and holds it until
    the query has stopped. The table is created, given new columns or widened only under that hold."""
    exporters()  # OTEL_METRICS_EXPORTER checked before anything is recorded
    check_access(args, kafka)
    check_start(args, kafka, url)
    query_plan(spark, args, kafka, url, change=False)
    store = OffsetStore(url)
    store.ensure_job(args.job, "stream")
    started = time.monotonic()
    summary = StreamSummary(args.job, "succeeded")
    with job_metrics(url, args.job, kafka) as metrics:
        _run_held(args, spark, kafka, url, stop, on_batch, store, summary, metrics, stopped)
    summary.seconds = time.monotonic() - started
    return summary


def _run_held(args: StreamArgs, spark, kafka: Mapping[str, str], url: str, stop: threading.Event,
              on_batch: Callable[[dict], None] | None, store: OffsetStore, summary: StreamSummary,
              metrics: JobMetrics | None, stopped: Callable[[], object]) -> None:
    """The launch once checked: it takes the job, runs the query until it ends or `stop`, then fills the
    summary's totals. Meanwhile it follows its entry (`entry_watch`): a change it follows stops the query between
    batches, changes the table under the launch's hold and starts the query again from the same checkpoint, so the
    next batch starts where the last committed one ended; a change it refuses stops it between batches and fails the
    launch, nothing of the new entry written."""
    from pyspark.errors import StreamingQueryException

    with store.hold(args.job, wait_s=wait_seconds(args.wait_for_job), wait_hint="--wait-for-job 10m",
                    on_wait=lambda h: console.print(f"waiting for {h.describe()}", highlight=False)) as lease, \
            recorded_run(store, args.job, spark.sparkContext.applicationId, lease,
                         stream_lineage_io(args, kafka, url)) as run_row:
        first_batch = store.last_batch_id(args.job)
        running = args  # what the query runs: the launch's arguments, with the entry changes followed since
        query = start(spark, running, kafka, url, query_plan(spark, running, kafka, url, lease.generation))
        watch = EntryWatch(args.job, args.pipeline, args.table, args.entry, args.spec,
                           say=lambda message: console.print(message, highlight=False, markup=False))
        seen, newest, set_aside = -1, None, None

        def report() -> None:
            """One call per micro-batch that ran, in order. lastProgress alone misses a batch that ended between
            two looks, and an idle trigger reports the next batch's id; so once it changes, the batches that ran
            (with an addBatch time) are taken from recentProgress, the last 100."""
            nonlocal seen, newest
            last = query.lastProgress if on_batch or metrics else None
            if last is None or last["timestamp"] == newest:
                return
            newest = last["timestamp"]
            if metrics is not None:
                metrics.observe()
            for progress in query.recentProgress:
                if progress["batchId"] > seen and "addBatch" in progress["durationMs"]:
                    seen = progress["batchId"]
                    if on_batch:
                        on_batch(progress)

        while True:
            changes = None
            try:
                while query.isActive:
                    report()
                    if stop.is_set():
                        stop_between_batches(query, args.grace_s)
                        stopped()
                        run_row.status = summary.status = "stopped"
                        break
                    changes = watch.check()
                    if changes is not None:
                        stop_between_batches(query, args.grace_s)
                        break
                    try:
                        query.awaitTermination(0.5)
                    except StreamingQueryException:
                        break  # the failure is the query's exception(), below
            except KeyboardInterrupt:
                stop_between_batches(query, args.grace_s)
                stopped()
                raise
            report()
            failure = query.exception()
            if failure is None and changes is not None:
                if changes.refused:
                    stopped()
                    raise changes.error()
                running = _running(args, changes.spec)
                plan = query_plan(spark, running, kafka, url, lease.generation)  # the table changes here
                watch.adopt(changes.spec)
                console.print(f"stream {args.job}: its entry changed ({'; '.join(changes.followed)}); applied "
                              "between two batches, without a restart", highlight=False)
                query = start(spark, running, kafka, url, plan)
                continue
            refused = refused_checkpoint(failure) if set_aside is None else None
            if refused is None:
                break
            # planning refused the checkpoint before anything of that batch was read or recorded: offsets_db is the
            # truth, and the stream goes on from there with a checkpoint of its own
            set_aside = set_checkpoint_aside(spark, args.checkpoint, refused)
            console.print(f"stream {args.job}: its checkpoint disagreed with offsets_db; set aside as {set_aside}, "
                          "resuming where offsets_db says", highlight=False)
            query = start(spark, running, kafka, url, query_plan(spark, running, kafka, url, lease.generation))
        stopped()  # the query ended (a stop, its end, a failure): nothing is left for a stop's grace to cut
        if failure is not None:
            raise StreamfillError(f"stream {args.job!r} failed: {without_jvm_stack(failure)}") from None
    summary.batches, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)


def _running(args: StreamArgs, spec: PipelineSpec) -> StreamArgs:
    """`args` running `spec` (`args.spec`), the entry a running stream follows. `args.entry` stays the entry the
    launch read, so what the stream does not follow (its start, its stop grace) stays as it was."""
    following = copy.copy(args)
    following.__dict__["spec"] = spec  # the cached_property's value: set, where reading it would read the file
    return following


def launch(args: StreamArgs, master: str | None = None) -> StreamSummary:
    """The whole launch, as `streamfill stream` and spark-submit run it: a session, SIGTERM (or the end of the
    Airflow task that started it) to stop between batches within the stop grace, a line per micro-batch and a
    summary. A failure is one message and the exit code of what it was (console.EXIT_CODES)."""
    from streamfill.spark_jobs.session import job_session, say_where

    settings = get_settings()
    stop = threading.Event()
    stopping = StopGrace(stop, args.grace_s, args.job)
    signal.signal(signal.SIGTERM, lambda *_: stopping("SIGTERM"))
    watch_task(os.environ.get(STOP_WITH_ENV), stopping)
    spark = job_session(f"streamfill-stream-{args.job}", master, settings)
    say_where(spark, settings)

    def print_batch(p: dict) -> None:
        sink = p.get("sink", {}).get("numOutputRows", -1)
        console.print(f"batch {p['batchId']}: {p['numInputRows']:,} records read"
                      + (f", {sink:,} rows out" if sink >= 0 else "")
                      + f", {p.get('processedRowsPerSecond', 0):,.0f} records/s", highlight=False)

    try:
        with refusals(ValueError), reaching(settings.offsets_db_url):
            summary = run(args, spark, settings.kafka_client(), settings.offsets_db_url, stop, print_batch,
                          stopping.ended)
    finally:
        stopping.ended()  # however run ended, no query runs now: the launch shuts down uncut
        spark.stop()
    console.print(f"stream {args.job} {summary.status} after {summary.seconds:.1f} s: {summary.batches} batches "
                  f"committed, {summary.rows:,} rows into {args.table}, {summary.dead_letters:,} dead letters")
    return summary


def main(argv: Sequence[str]) -> int:
    """spark-submit entry point: the same flags as `streamfill stream`."""
    return submit_main(StreamArgs, launch, argv, "spark_jobs/stream.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

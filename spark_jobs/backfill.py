"""A bounded, resumable, idempotent reprocessing of a Kafka range into Postgres (`streamfill backfill`).

The range is resolved and recorded in offsets_db (the job's config) before anything is read. Each chunk is one
`spark.read` of `streamfill_kafka` with the job option and one `streamfill_postgres` write, so each chunk is
committed exactly-once together with the job's snapshot. Re-run with the same arguments, the job continues
from its last committed chunk; after it finished, `append-new` has nothing to do and `replace` starts a new
pass that rewrites the same rows.

    spark-submit spark_jobs/backfill.py --job J --topic T --from earliest --to latest --table events_backfill
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.source_declarations import SUBSCRIBE
from streamfill.console import err, fail, refusals
from streamfill.errors import StreamfillError, first_lines
from streamfill.offsets_db.engine import reaching
from streamfill.offsets_db.store import OffsetStore
from streamfill.settings import get_settings
from streamfill.spark_jobs.backfill_args import BackfillArgs
from streamfill.spark_jobs.backfill_chunks import write_chunks
from streamfill.spark_jobs.backfill_plan import remaining
from streamfill.spark_jobs.backfill_prepare import Prepared, check_job, prepare, record, resolve
from streamfill.spark_jobs.backfill_report import Summary, print_summary, progress_bar
from streamfill.spark_jobs.entry_sink import sink_options
from streamfill.spark_jobs.job_flags import submit_main
from streamfill.spark_jobs.kafka_read import kafka_reader, rows_of
from streamfill.spark_jobs.launch_args import wait_seconds
from streamfill.spark_jobs.telemetry import exporters, job_metrics


def check_table(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str) -> None:
    """The sink's check of --table on the driver, as the stream does before it records anything: a table that
    does not fit never leaves a plan behind. Nothing is created or added yet: the chunks' writes do that, under
    the launch's hold on the job."""
    from streamfill.connectors.spark.postgres_plan import prepare_table

    columns_only = kafka_reader(spark.read, args.spec, args.job, kafka, url).option(SUBSCRIBE.key, args.topic).load()
    prepare_table(sink_options(args.spec, args.job, args.table, args.mode, url),
                  rows_of(args.spec, columns_only).schema, change=False)


def run(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str,
        on_progress: Callable[[int, int], None] | None = None) -> Summary:
    """Process what is left of the plan chunk by chunk; `on_progress(done, total)` after each chunk.

    Every argument and the table are checked first; then the launch takes the job (refused, or waiting with
    --wait-for-job, while another launch holds it), decides again under that hold, and records its plan."""
    from streamfill.connectors.spark import register

    exporters()  # OTEL_METRICS_EXPORTER checked before anything is recorded
    store = OffsetStore(url)
    store.check_grants()
    broker = Broker(kafka)
    started = time.monotonic()
    check_job(args, store)

    def planned() -> tuple[Prepared, Summary]:
        """The plan as offsets_db has it now, with the summary of a launch that finds it complete."""
        prep = prepare(args, broker, store)
        summary = Summary(args.job, prep.state, prep.window.to_json())
        if prep.state == "complete":
            if on_progress:
                on_progress(prep.window.total, prep.window.total)
            summary.seconds = time.monotonic() - started
        return prep, summary

    prep, summary = planned()
    if prep.state == "complete":
        return summary
    register(spark)
    check_table(args, spark, kafka, url)
    store.ensure_job(args.job, "backfill")  # the job must exist to be held; its plan is recorded once held
    with job_metrics(url, args.job, kafka) as metrics:
        def progressed(done: int, total: int) -> None:
            if metrics is not None:
                metrics.observe()
            if on_progress:
                on_progress(done, total)

        with store.hold(args.job, wait_s=wait_seconds(args.wait_for_job), wait_hint="--wait-for-job 10m",
                        on_wait=lambda h: err.print(f"waiting for {h.describe()}", highlight=False)) as lease:
            prep, summary = planned()  # again: another launch may have moved the job while this one waited
            if prep.state == "complete":
                return summary
            window, total = prep.window, prep.window.total
            record(args, prep, store)
            progressed(total - remaining(window, prep.done), total)
            first_batch = store.last_batch_id(args.job)
            done = write_chunks(args, spark, kafka, url, store, lease, prep, progressed)
    summary.chunks, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)
    summary.offsets = remaining(window, prep.done) - remaining(window, done)
    summary.seconds = time.monotonic() - started
    return summary


def launch(args: BackfillArgs, master: str | None = None) -> Summary:
    """The whole launch, as `streamfill backfill` and spark-submit run it: every check against the broker and
    offsets_db before Spark starts, a progress bar, a summary. A failure is one message and the exit code of
    what it was (console.EXIT_CODES)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from streamfill.spark_jobs.session import job_session, say_where

    settings = get_settings()
    with refusals(), reaching(settings.offsets_db_url):
        check_job(args, OffsetStore(settings.offsets_db_url))
        resolve(args, Broker(settings.kafka_client()))
    spark = job_session(f"streamfill-backfill-{args.job}", master, settings)
    say_where(spark, settings)
    try:
        with refusals(ValueError), progress_bar(args.job) as advance:
            summary = run(args, spark, settings.kafka_client(), settings.offsets_db_url, advance)
    except (PySparkException, Py4JJavaError) as exc:  # the latter: a Spark error PySpark has no class for
        raise fail(StreamfillError(f"{first_lines(exc)}\nCommitted chunks stay committed; re-run the same command "
                                   "to continue")) from None
    finally:
        spark.stop()
    print_summary(summary, args.table)
    return summary


def main(argv: Sequence[str]) -> int:
    """spark-submit entry point: the same flags as `streamfill backfill`."""
    return submit_main(BackfillArgs, launch, argv, "spark_jobs/backfill.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`streamfill stream` and `streamfill backfill`: the same launches as spark-submit of spark_jobs/stream.py and
spark_jobs/backfill.py, with the same flags; arguments are checked before a JVM starts. With --job naming an
entry of the jobs file, everything else comes from the entry; flags override it."""

from __future__ import annotations

from typing import Annotated

import typer

from streamfill import extras
from streamfill.console import refusals
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK

JobOpt = Annotated[str, typer.Option("--job", help="an entry of the jobs file, or the job name for --pipeline")]
PipelineOpt = Annotated[str | None, typer.Option(
    "--pipeline", help="the entry whose format, columns and rules parse the topic (default: --job's entry)")]
WaitOpt = Annotated[str, typer.Option(
    "--wait-for-job", help="while another launch holds the job: wait this long (30s, 10m, 1h) instead of refusing")]
MasterOpt = Annotated[str | None, typer.Option("--master", help="Spark master URL (STREAMFILL_SPARK_MASTER)")]


def stream(
    job: JobOpt,
    topic: Annotated[str | None, typer.Option("--topic", help="Kafka topic (default: the entry's)")] = None,
    table: Annotated[str | None, typer.Option(
        "--table", help="target table, schema.table allowed (default: the entry's)")] = None,
    trigger: Annotated[str | None, typer.Option(
        "--trigger", help="available-now, or an interval such as 5s (default: the entry's)")] = None,
    max_offsets_per_trigger: Annotated[int | None, typer.Option(
        "--max-offsets-per-trigger", help="at most this many offsets per micro-batch")] = None,
    checkpoint: Annotated[str | None, typer.Option(
        "--checkpoint", help="Spark checkpoint directory or Hadoop file system URL (default: the entry's "
                             "checkpoint_dir/JOB, else STREAMFILL_HOME/checkpoints/JOB)")] = None,
    start: Annotated[str | None, typer.Option(
        "--start", help="earliest, latest or an ISO-8601 time: where the stream starts while offsets_db has no "
                        "position for the job (default: the entry's start, else earliest)")] = None,
    stop_grace: Annotated[str | None, typer.Option(
        "--stop-grace", help="how long a stop (SIGTERM) may take to commit the batch in flight before it is cut, "
                             "e.g. 60s (default: the entry's stop_grace, else 60s)")] = None,
    pipeline: PipelineOpt = None,
    wait_for_job: WaitOpt = "0",
    master: MasterOpt = None,
    detach: Annotated[bool, typer.Option(
        "--detach", help="run the stream's driver on a Spark Connect server and return once the query started "
                         "(--remote, else STREAMFILL_SPARK_REMOTE, else the local stack's)")] = False,
    stop: Annotated[bool, typer.Option(
        "--stop", help="stop the job's detached stream between batches (its batch in flight commits first)")] = False,
    remote: Annotated[str | None, typer.Option(
        "--remote", help="the Spark Connect server of --detach and --stop, sc://host:15002")] = None,
) -> None:
    """Kafka into Postgres, exactly-once, until stopped (SIGTERM or Ctrl-C finish the batch in flight)."""
    with refusals():
        extras.require(extras.SPARK, "`streamfill stream`")
    from streamfill.console import console
    from streamfill.offsets_db.engine import reaching
    from streamfill.settings import get_settings
    from streamfill.spark_jobs import stream as job_module
    from streamfill.spark_jobs import stream_detached

    with refusals():
        args = job_module.StreamArgs.from_flags(job=job, topic=topic, table=table, trigger=trigger,
                                                max_offsets_per_trigger=max_offsets_per_trigger,
                                                checkpoint=checkpoint, start=start, pipeline=pipeline,
                                                wait_for_job=wait_for_job, stop_grace=stop_grace)
    if not (detach or stop):
        job_module.launch(args, master)
        return
    settings = get_settings()
    with refusals(ValueError), reaching(settings.offsets_db_url):
        if stop:
            run = stream_detached.stop_detached(settings.offsets_db_url, job, args.grace_s, remote)
            console.print(f"stream {job}: stopped ({run.describe()})" if run else
                          f"stream {job}: no detached run of it is running", highlight=False)
            return
        run = stream_detached.start_detached(args, remote or settings.spark_remote_url, settings.kafka_client(),
                                             settings.offsets_db_url)
    console.print(run.describe(), highlight=False)


def backfill(
    job: JobOpt,
    from_: Annotated[str, typer.Option("--from", help="earliest, latest, per-partition JSON or an ISO-8601 time")],
    to: Annotated[str, typer.Option("--to", help="earliest, latest, per-partition JSON or an ISO-8601 time")],
    topic: Annotated[str | None, typer.Option("--topic", help="Kafka topic (default: the entry's)")] = None,
    table: Annotated[str | None, typer.Option(
        "--table", help="target table (default: the entry's; with --topic, JOB with - and . as _)")] = None,
    mode: Annotated[str | None, typer.Option(
        "--mode", help="append-new (keep existing rows) or replace (upsert); default: the entry's")] = None,
    chunk_size: Annotated[int, typer.Option("--chunk-size", help="offsets per exactly-once chunk")] = DEFAULT_CHUNK,
    pipeline: PipelineOpt = None,
    wait_for_job: WaitOpt = "0",
    master: MasterOpt = None,
) -> None:
    """Reprocess a past range into Postgres: planned and recorded first, committed chunk by chunk, resumable."""
    with refusals():
        extras.require(extras.SPARK, "`streamfill backfill`")
    from streamfill.spark_jobs import backfill as job_module

    with refusals():
        args = job_module.BackfillArgs.from_flags(job=job, topic=topic, from_=from_, to=to, table=table, mode=mode,
                                                  chunk_size=chunk_size, pipeline=pipeline,
                                                  wait_for_job=wait_for_job)
    job_module.launch(args, master)

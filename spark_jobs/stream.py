"""The long-running stream (`streamfill stream`): Kafka, parse and validate, valid rows and dead letters into
Postgres in one exactly-once batch commit.

Stopping: SIGTERM (or Ctrl-C) to the driver's Python process lets the batch in flight finish, then stops the
query between batches. The job resumes where offsets_db says it stands, with or without its checkpoint.

    spark-submit spark_jobs/stream.py --job orders --topic orders --table orders_events --trigger 5s
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from offsets_db.store import OffsetStore
from spark_jobs.runs import recorded_run, sink_options


class StreamArgsError(ValueError):
    pass


@dataclass(frozen=True)
class StreamArgs:
    job: str
    topic: str
    table: str
    checkpoint: Path
    trigger: str = "5s"
    max_offsets_per_trigger: int | None = None
    starting: str = "earliest"


@dataclass
class StreamSummary:
    job: str
    status: str
    batches: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0


def parse_trigger(raw: str) -> dict:
    """`available-now` or an interval such as 500ms, 5s, 2m: DataStreamWriter.trigger's keyword arguments."""
    text = raw.strip().lower()
    if text in ("available-now", "availablenow"):
        return {"availableNow": True}
    m = re.fullmatch(r"(\d+)\s*(ms|s|m)", text)
    if not m or int(m.group(1)) == 0:
        raise StreamArgsError(f"--trigger {raw!r} is not a trigger; use available-now (read what is there, then "
                              "stop) or an interval such as 5s, 500ms or 1m")
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}[m.group(2)]
    return {"processingTime": f"{m.group(1)} {unit}"}


def start(spark, args: StreamArgs, bootstrap: str, url: str):
    from connectors.spark import register
    from spark_jobs.transforms import parse_events

    register(spark)
    reader = (spark.readStream.format("streamfill_kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", args.topic)
              .option("startingOffsets", args.starting).option("job", args.job).option("offsetsDbUrl", url))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return (parse_events(reader.load()).writeStream.format("streamfill_postgres")
            .options(**sink_options(args.job, args.table, "append-new", url))
            .option("checkpointLocation", str(args.checkpoint))
            .queryName(f"streamfill-{args.job}")
            .trigger(**parse_trigger(args.trigger)).start())


def run(args: StreamArgs, spark, bootstrap: str, url: str, stop: threading.Event,
        on_batch: Callable[[dict], None] | None = None) -> StreamSummary:
    """Run until the query ends (AvailableNow) or `stop` is set; then stop between batches."""
    parse_trigger(args.trigger)
    store = OffsetStore(url)
    store.ensure_job(args.job, "stream")
    first_batch = store.last_batch_id(args.job)
    started = time.monotonic()
    summary = StreamSummary(args.job, "succeeded")
    with recorded_run(store, args.job, spark.sparkContext.applicationId) as run_row:
        query = start(spark, args, bootstrap, url)
        seen = -1
        try:
            while query.isActive:
                progress = query.lastProgress
                if progress and progress["batchId"] != seen and on_batch:
                    seen = progress["batchId"]
                    on_batch(progress)
                if stop.is_set():
                    _stop_between_batches(query)
                    run_row.status = summary.status = "stopped"
                    break
                query.awaitTermination(0.5)
        except KeyboardInterrupt:
            _stop_between_batches(query)
            raise
        last = query.lastProgress
        if last and last["batchId"] != seen and on_batch:
            on_batch(last)
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(f"stream {args.job!r} failed: {failure.desc}") from None
    summary.batches, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)
    summary.seconds = time.monotonic() - started
    return summary


def _stop_between_batches(query, timeout_s: float = 600) -> None:
    """Wait for the trigger in flight to finish (its commit included), then stop before the next one."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def main() -> None:
    """spark-submit entry point: the same command line as `streamfill stream`."""
    import sys

    from streamfill.cli import app

    app(["stream", *sys.argv[1:]])


if __name__ == "__main__":
    main()

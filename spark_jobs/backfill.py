"""A bounded, resumable, idempotent reprocessing of a Kafka range into Postgres (`streamfill backfill`).

The range is resolved and recorded in offsets_db (the job's config) before anything is read. Each chunk is one
`spark.read` of `streamfill_kafka` with the job option and one `streamfill_postgres` write, so each chunk is
committed exactly-once together with the job's snapshot. Re-run with the same arguments, the job continues
from its last committed chunk; after it finished, `append-new` has nothing to do and `replace` starts a new
pass that rewrites the same rows.

    spark-submit spark_jobs/backfill.py --job J --topic T --from earliest --to latest --table events_backfill
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from connectors.kafka.broker import Broker
from connectors.kafka.partitions import TopicPartition
from offsets_db.store import OffsetStore
from spark_jobs.backfill_plan import (
    BackfillError, Window, next_chunk, parse_spec, progress, remaining, resolve_window,
)
from spark_jobs.runs import recorded_run, sink_options

DEFAULT_CHUNK = 500_000


@dataclass(frozen=True)
class BackfillArgs:
    job: str
    topic: str
    frm: str
    to: str
    table: str
    mode: str = "append-new"
    chunk_size: int = DEFAULT_CHUNK

    def recorded(self) -> dict[str, str]:
        """What makes two launches the same backfill (the mode may change between passes)."""
        return {"topic": self.topic, "from": self.frm, "to": self.to, "table": self.table}


@dataclass
class Prepared:
    window: Window
    done: dict[TopicPartition, int]
    state: str  # "new", "resuming", "new pass" or "complete"


@dataclass
class Summary:
    job: str
    state: str
    ranges: dict[str, list[int]]
    offsets: int = 0
    chunks: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    per_partition: dict[str, int] = field(default_factory=dict)


def check_job(args: BackfillArgs, store: OffsetStore) -> None:
    """A backfill under a stream's name would move the stream's snapshot: refused before anything runs."""
    kind = store.job_kind(args.job)
    if kind == "stream":
        raise BackfillError(f"--job {args.job!r} is a stream job in offsets_db; a backfill needs a name of its own, "
                            f"e.g. {args.job}-backfill")


def resolve(args: BackfillArgs, broker: Broker, now_ms: int | None = None) -> Window:
    """--from/--to to concrete ranges, every check made against the broker before Spark starts."""
    if args.chunk_size < 1:
        raise BackfillError(f"--chunk-size {args.chunk_size} must be at least 1 (offsets per chunk)")
    if args.mode not in ("append-new", "replace"):
        raise BackfillError(f"--mode {args.mode!r} is not a mode; use append-new (keep existing rows) or replace")
    frm = parse_spec(args.frm, "--from", args.topic)
    to = parse_spec(args.to, "--to", args.topic)
    topics = broker.topics()
    parts = [TopicPartition(args.topic, p) for p in range(topics.get(args.topic, 0))]
    watermarks = broker.watermarks(parts) if parts else {}
    return resolve_window(args.topic, topics.get(args.topic), watermarks, broker.offsets_for_times, frm, to,
                          now_ms if now_ms is not None else int(time.time() * 1000), raw_from=args.frm,
                          raw_to=args.to, known_topics=sorted(topics))


def prepare(args: BackfillArgs, broker: Broker, store: OffsetStore) -> Prepared:
    """Decide what this launch does and record the plan; nothing is read yet."""
    prior = store.job_config(args.job).get("backfill")
    snap = {TopicPartition(t, p): o for (t, p), o in store.snapshot(args.job).items()}
    if prior:
        old = Window.from_json(prior["window"])
        old_done = progress(old, snap)
        unfinished = remaining(old, old_done) > 0
        same = {k: prior.get(k) for k in args.recorded()} == args.recorded()
        if same and unfinished:
            store.ensure_job(args.job, "backfill", {"backfill": {**prior, "mode": args.mode}})
            return Prepared(old, old_done, "resuming")  # the recorded plan, not a new resolution
        if unfinished:
            raise BackfillError(
                f"job {args.job!r} has an unfinished backfill of topic {prior['topic']!r} from {prior['from']!r} "
                f"to {prior['to']!r} into {prior['table']!r} ({remaining(old, old_done):,} offsets left). Re-run it "
                "with those arguments to finish it, or give this backfill a new --job name")
    window = resolve(args, broker)
    if prior and window == Window.from_json(prior["window"]) and prior["table"] == args.table \
            and args.mode == "append-new":
        return Prepared(window, {tp: e for tp, (_, e) in window.bounds.items()}, "complete")
    store.ensure_job(args.job, "backfill",
                     {"backfill": {**args.recorded(), "mode": args.mode, "window": window.to_json()}}, restart=True)
    return Prepared(window, {tp: s for tp, (s, _) in window.bounds.items()}, "new pass" if prior else "new")


def run(args: BackfillArgs, spark, bootstrap: str, url: str,
        on_progress: Callable[[int, int], None] | None = None) -> Summary:
    """Process what is left of the plan chunk by chunk; `on_progress(done, total)` after each chunk."""
    from connectors.spark import register

    store = OffsetStore(url)
    broker = Broker({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    check_job(args, store)
    prep = prepare(args, broker, store)
    window, total = prep.window, prep.window.total
    summary = Summary(args.job, prep.state, window.to_json())
    if on_progress:
        on_progress(total - remaining(window, prep.done), total)
    if prep.state == "complete":
        summary.seconds = time.monotonic() - started
        return summary
    register(spark)
    first_batch = store.last_batch_id(args.job)
    with recorded_run(store, args.job, spark.sparkContext.applicationId):
        done = prep.done
        while chunk := next_chunk(window, done, args.chunk_size):
            _write_chunk(spark, args, chunk, bootstrap, url)
            done = progress(window, {TopicPartition(t, p): o for (t, p), o in store.snapshot(args.job).items()})
            if any(done[tp] < e for tp, (_, e) in chunk.items()):
                raise RuntimeError(f"chunk {_shape(chunk, 1)} of job {args.job!r} was written but offsets_db does "
                                   "not show it committed; re-run the backfill to continue")
            if on_progress:
                on_progress(total - remaining(window, done), total)
    summary.chunks, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)
    summary.offsets = remaining(window, prep.done) - remaining(window, done)
    summary.seconds = time.monotonic() - started
    return summary


def _shape(chunk: dict[TopicPartition, tuple[int, int]], side: int) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, bounds in chunk.items():
        out.setdefault(tp.topic, {})[str(tp.partition)] = bounds[side]
    return out


def _write_chunk(spark, args: BackfillArgs, chunk: dict[TopicPartition, tuple[int, int]], bootstrap: str,
                 url: str) -> None:
    from spark_jobs.transforms import parse_events

    parts = {args.topic: sorted(tp.partition for tp in chunk)}
    kafka = (spark.read.format("streamfill_kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("assign", json.dumps(parts))
             .option("startingOffsets", json.dumps(_shape(chunk, 0)))
             .option("endingOffsets", json.dumps(_shape(chunk, 1)))
             .option("minPartitions", str(spark.sparkContext.defaultParallelism))
             .option("job", args.job).option("offsetsDbUrl", url)
             .load())
    (parse_events(kafka).write.format("streamfill_postgres")
     .options(**sink_options(args.job, args.table, args.mode, url)).mode("append").save())


def main() -> None:
    """spark-submit entry point: the same command line as `streamfill backfill`."""
    import sys

    from streamfill.cli import app

    app(["backfill", *sys.argv[1:]])


if __name__ == "__main__":
    main()

"""Kafka into Postgres end to end: `streamfill stream` against the common hand-written alternative, same run.

  (a) streamfill: streamfill_kafka -> the orders entry's parse (spark_jobs.pipelines) -> streamfill_postgres,
      exactly-once (rows, dead letters and offsets in one transaction per micro-batch), Trigger.AvailableNow;
  (b) the alternative: Spark's format("kafka") -> the same parse -> foreachBatch writing valid rows and
      dead letters with Spark's JDBC writer (batch persisted, default JDBC options), at-least-once;
  (c) `streamfill backfill` of the same whole topic, chunks of --batch offsets;
  (d) the same backfill with --chunk-size 50000 (each chunk a Spark job of its own);
  (e) streamfill stream with a business key and replace (an upsert by event_id);
  (g) the same upsert with deletes (`deletes: tombstone`) over the same events keyed by event_id, followed by a
      tombstone for every DELETE_EVERY-th event: the delete path's cost beside (e);
  (f) the raw ceiling: the same read and parse, each task's rows binary COPYed straight into an indexed table,
      no stage, no offsets, no exactly-once.
Both streams use the same maxOffsetsPerTrigger, so the batches have the same sizes. Every way parses with the
same compiler (spark_jobs.pipelines.compile): (b), as hand-written code would, with Spark's from_json and casts
alone; the streamfill ways and (f) with the values typed in the read where that is certain
(typed_in_read.reader_options) and Spark's from_json for the rest. The benchmark checks that (a), (b), (c), (d) and (f)
wrote equal tables and dead letters. Prints offsets per
second, the ratios to (b) and to (f), and the peak RSS of the driver (JVM and Python) and of the Python workers
(the sum over workers at the peak sample).
With --contended, each way also runs again while users use its table: once the table exists, an analyst's
REPEATABLE READ transaction reads it and stays open until the way ends (holding its lock on the table), and a
dashboard's short query runs every half second; the run's time and the dashboard's worst wait are reported
beside the way's time alone.
Repeats are interleaved; the median is reported. Needs `streamfill stack up`; Maven fetches Spark's Kafka
source and the JDBC driver once. At its end, also when it fails, the run removes its offsets_db jobs, tables and
work folder (bench/cleanup.py), and its topics of events unless --keep-topic.

    .venv/bin/python bench/end_to_end.py [--events 2000000] [--partitions 4] [--batch 500000] [--repeat 3]
                                         [--ways abcdefg] [--contended] [--keep-topic]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

from cleanup import Leftovers, measured
from peak_rss import PeakRss
from rich.console import Console
from shared.contention import ContentionSimulator
from shared.end_to_end_report import report
from shared.events_topic import add_topic_args, topic_with_events
from shared.jdbc_way import jdbc_target, jdbc_writer
from shared.raw_copy_way import copy_straight
from shared.same_rows import compare
from shared.spark_kafka import spark_kafka_jars
from shared.upserts import DELETE_EVERY, check_deletes, topic_with_deletes, upsert_jobs_file
from sqlalchemy import create_engine, text

from streamfill.spark_jobs import backfill, stream
from streamfill.spark_jobs.pipelines import entry
from streamfill.spark_jobs.pipelines.compile import parse

console = Console()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_topic_args(ap)
    ap.add_argument("--batch", type=int, default=500_000, help="maxOffsetsPerTrigger of both streams, chunk size")
    ap.add_argument("--small-chunk", type=int, default=50_000, help="the chunk size of way (d)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per way, interleaved; the median is reported")
    ap.add_argument("--ways", default="abcdefg", help="which ways to run (letters as listed above)")
    ap.add_argument("--contended", action="store_true",
                    help="run each way again while a reader holds its table and a short query probes it")
    args = ap.parse_args()
    measured(measure, args)


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    topic = topic_with_events(bootstrap, args.events, args.partitions, made)
    warm = topic_with_events(bootstrap, 20_000, args.partitions, made)
    if "g" in args.ways:
        deleting, deleting_count = topic_with_deletes(bootstrap, args.events, args.partitions, made)
        warm_deleting, _ = topic_with_deletes(bootstrap, 20_000, args.partitions, made)
    jars = spark_kafka_jars(settings.home / "spark-kafka")
    work = made.folder(Path(tempfile.mkdtemp(prefix="bench-e2e-")))
    os.environ["STREAMFILL_JOBS_FILE"] = str(upsert_jobs_file(work))

    from streamfill.spark_jobs.session import spark_session

    spark = spark_session("bench-e2e", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                  "spark.ui.showConsoleProgress": "false"})
    jdbc, props = jdbc_target(url)
    engine = create_engine(url)
    tables = made.tables
    written: dict[str, tuple[str, str]] = {}  # way -> (table, dead letters: a table or a job's name)
    current: dict[str, str] = {}  # the table the running way writes, for the contention simulator of --contended

    def streamfill(source: str, pipeline: str = "orders", way: str = "a") -> int:
        name = f"bench_sf_{uuid.uuid4().hex[:8]}"
        tables.append(name)
        current["table"] = name
        run = stream.StreamArgs(name.replace("_", "-"), source, name, work / name, "available-now", args.batch,
                                pipeline=pipeline)
        made.job(run.job)
        summary = stream.run(run, spark, settings.kafka_client(), url, threading.Event())
        written[way] = (name, "job:" + run.job)
        if way == "g":  # a delete is neither a row nor a dead letter: the offsets the job committed
            with engine.connect() as conn:
                return int(conn.scalar(text("SELECT sum(next_offset) FROM latest_offsets WHERE job = :j"),
                                       {"j": run.job}))
        return summary.rows + summary.dead_letters

    def alternative(source: str) -> int:
        name = f"bench_jdbc_{uuid.uuid4().hex[:8]}"
        tables.extend([name, f"{name}_dead"])
        current["table"] = name

        kafka = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(args.batch)).load())
        query = (parse(kafka, entry("orders")).writeStream.foreachBatch(jdbc_writer(jdbc, name, props))
                 .option("checkpointLocation", str(work / name)).trigger(availableNow=True).start())
        query.awaitTermination()
        written["b"] = (name, f"{name}_dead")
        with engine.connect() as conn:
            return sum(conn.scalar(text(f'SELECT count(*) FROM "{t}"')) for t in (name, f"{name}_dead"))

    def backfill_all(source: str, chunk: int, way: str) -> int:
        name = f"bench_bf_{uuid.uuid4().hex[:8]}"
        tables.append(name)
        current["table"] = name
        run = backfill.BackfillArgs(name.replace("_", "-"), source, "earliest", "latest", name, chunk_size=chunk,
                                    pipeline="orders")
        made.job(run.job)
        summary = backfill.run(run, spark, settings.kafka_client(), url)
        written[way] = (name, "job:" + run.job)
        return summary.offsets

    def ceiling(source: str) -> int:
        name = f"bench_raw_{uuid.uuid4().hex[:8]}"
        tables.extend([name, f"{name}_dead"])
        current["table"] = name
        count = copy_straight(spark, bootstrap, source, url, name, entry("orders"))
        written["f"] = (name, f"{name}_dead")
        return count

    all_ways = {"a": ("a streamfill stream (exactly-once)", lambda s: streamfill(s)),
                "b": ("b Spark kafka + foreachBatch JDBC (at-least-once)", alternative),
                "c": (f"c streamfill backfill, chunks of {args.batch:,}", lambda s: backfill_all(s, args.batch, "c")),
                "d": (f"d streamfill backfill, chunks of {args.small_chunk:,}",
                      lambda s: backfill_all(s, args.small_chunk, "d")),
                "e": ("e streamfill stream, upsert by event_id (replace)",
                      lambda s: streamfill(s, "orders_upsert", "e")),
                "f": ("f raw ceiling: read + parse + binary COPY, no exactly-once", ceiling),
                "g": (f"g streamfill stream, upsert by event_id with deletes (1 tombstone per {DELETE_EVERY} events)",
                      lambda s: streamfill(deleting if s == topic else warm_deleting, "orders_deletes", "g"))}
    ways = {k: all_ways[k] for k in args.ways}
    timings: dict[str, list[float]] = {k: [] for k in ways}
    contended: dict[str, list[float]] = {k: [] for k in ways}
    worst: dict[str, float] = {k: 0.0 for k in ways}
    peaks: dict[str, dict[str, int]] = {k: {} for k in ways}
    counts: dict[str, int] = {}
    same: list[str] = []
    try:
        for _, fn in ways.values():  # JVM, Python workers, JDBC driver, page cache
            fn(warm)
        for i in range(args.repeat):
            for k, (label, fn) in ways.items():
                with PeakRss() as rss:
                    started = time.perf_counter()
                    counts[k] = fn(topic)
                    timings[k].append(time.perf_counter() - started)
                peaks[k] = {n: max(v, peaks[k].get(n, 0)) for n, v in rss.peak.items()}
                console.print(f"{label}: {counts[k]:,} offsets in {timings[k][-1]:.1f} s")
                if args.contended:
                    current.clear()
                    with ContentionSimulator(url, lambda: current.get("table")) as users:
                        started = time.perf_counter()
                        counts[k] = fn(topic)
                        contended[k].append(time.perf_counter() - started)
                    worst[k] = max(worst[k], users.worst)
                    console.print(f"{label}, its table held by a reader: {counts[k]:,} offsets in "
                                  f"{contended[k][-1]:.1f} s; the probe's worst wait {users.worst:.3f} s over "
                                  f"{users.probes} probes")
            compared = sorted(set(written) & {"a", "b", "c", "d", "f"})
            if i == 0 and len(compared) > 1:
                same = compare(engine, written, compared)
    finally:
        spark.stop()
        engine.dispose()
    if "g" in counts:  # its topic holds the tombstones too; its table, the upserts' rows less the deleted keys
        read = counts.pop("g")
        assert read == deleting_count, f"way g read {read:,} offsets of {deleting_count:,}"
        check_deletes(engine, written, deleting_count - args.events)
    assert len(set(counts.values())) == 1 and args.events in counts.values(), f"the ways disagree: {counts}"
    report(args, {k: label for k, (label, _) in ways.items()}, timings, contended, worst, peaks, same,
           deleting_count if "g" in timings else None)


if __name__ == "__main__":
    main()

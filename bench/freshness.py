"""Freshness at a steady rate: how long an event takes from Kafka until a query of the table sees it.

Demo events (1% bad) are produced at a fixed rate by bench/paced_producer.py in a process of its own, into a
stream already running, two ways in the same run, one after the other, each on a fresh topic and each after a
warm-up run of its own:
  (a) `streamfill stream` (exactly-once: rows, dead letters and offsets in one transaction per micro-batch);
  (b) the hand-written alternative: Spark's format("kafka"), the same parse, foreachBatch writing valid rows and
      dead letters with Spark's JDBC writer (at-least-once), into a table made beforehand with an index on
      (topic, partition, offset) so the table can be watched.
Each rate of --rates runs each way at each trigger of --triggers. First the producer runs alone (a topic nobody
reads) to show it holds the rate by itself.

A watcher reads every 50 ms, per Kafka partition, the highest offset a query of the table sees (an index lookup);
an offset is visible from the first look that saw it or a higher one (each way writes a partition's rows of a
batch in one transaction). Freshness = visible time - Kafka timestamp (the producer's CreateTime, this machine's
clock), over every 100th offset produced after the first --settle seconds (a new query's first batches start its
Python workers, and the backlog they leave takes a while to drain). Per way: p50, p99 and the worst; the p50 of
the last 10 s (above the p50, the way fell behind); the rate the producer kept; the median micro-batch (Spark's
durationMs: the whole trigger, the read's planning, addBatch), the slowest and the rows per batch; the machine
during the run (CPU busy and stolen, from /proc/stat; the load average). Needs `streamfill stack up`. At its
end, also when it fails, the run removes its offsets_db jobs, tables, topics and work folder.

    .venv/bin/python bench/freshness.py [--rates 20000,50000] [--triggers 1s,100ms] [--seconds 120] [--settle 30]
        [--ways ab]
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from cleanup import Leftovers, measured
from rich.console import Console
from rich.table import Table
from shared.freshness_run import Machine, Run, quantile
from shared.freshness_ways import WAYS, paced
from shared.spark_kafka import spark_kafka_jars
from sqlalchemy import create_engine

from streamfill.trigger_grammar import parse_trigger

console = Console(width=220)
WARM_UP = (20_000, 2)  # events per second, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="20000,50000", help="events per second, comma-separated")
    ap.add_argument("--triggers", default="1s,100ms", help="each way's trigger intervals, comma-separated")
    ap.add_argument("--seconds", type=float, default=120, help="how long the producer runs at each rate")
    ap.add_argument("--settle", type=float, default=30,
                    help="seconds of each run left out of the figures: a new query's first batches")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--ways", default="ab", help="which ways: a, b or ab")
    args = ap.parse_args()
    for trigger in args.triggers.split(","):
        parse_trigger(trigger)
    measured(measure, args)


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    work = made.folder(Path(tempfile.mkdtemp(prefix="bench-fresh-")))
    rates = [int(r) for r in args.rates.split(",")]
    triggers = args.triggers.split(",")

    alone = Table(title="the producer alone (a topic nobody reads)")
    for col in ("rate asked", "rate kept", "producer CPU s", "machine"):
        alone.add_column(col, justify="right")
    for rate in rates:
        topic = made.topic(f"bench_fresh_alone_{uuid.uuid4().hex[:8]}")
        with Machine() as machine:
            sent, _ = paced(topic, rate, min(args.seconds, 30), args.partitions)
        alone.add_row(f"{rate:,}", f"{sent['rate']:,}", f"{sent['cpu_s']:.1f}", machine.describe())
    console.print(alone)

    from streamfill.spark_jobs.session import spark_session

    jars = spark_kafka_jars(settings.home / "spark-kafka")
    spark = spark_session("bench-fresh", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                    "spark.ui.showConsoleProgress": "false"})
    engine = create_engine(url)
    results: list[tuple[int, str, str, Run]] = []
    try:
        for key in args.ways:  # JVM, Python workers, JDBC driver: each way warm before it is measured
            WAYS[key][1](spark, bootstrap, url, engine, work, made, args.partitions, triggers[0], *WARM_UP)
        for rate in rates:
            for trigger in triggers:
                for key in args.ways:
                    label, way = WAYS[key]
                    run = way(spark, bootstrap, url, engine, work, made, args.partitions, trigger, rate,
                              args.seconds + args.settle, args.settle)
                    results.append((rate, trigger, f"({key}) {label}", run))
                    console.print(f"{rate:,}/s, trigger {trigger}, ({key}): p50 {quantile(run.steady(), 50):.2f} s, "
                                  f"p99 {quantile(run.steady(), 99):.2f} s, {run.machine.describe()}", highlight=False)
    finally:
        spark.stop()
        engine.dispose()

    table = Table(title=f"freshness for {args.seconds:.0f} s at each rate after {args.settle:.0f} s of settling, "
                        f"{args.partitions} partitions (visible in the table - Kafka timestamp, every 100th offset)")
    for col in ("rate", "trigger", "way", "p50 s", "p99 s", "worst s", "p50 last 10 s", "rate kept", "batch ms",
                "slowest batch ms", "read plan ms", "addBatch ms", "rows/batch", "machine"):
        table.add_column(col, justify="left" if col in ("way", "machine") else "right")
    for rate, trigger, label, run in results:
        b, steady = run.batches, run.steady()
        table.add_row(f"{rate:,}", trigger, label, f"{quantile(steady, 50):.2f}", f"{quantile(steady, 99):.2f}",
                      f"{max(steady):.2f}", f"{quantile(run.last(), 50):.2f}", f"{run.sent['rate']:,}",
                      f"{b.median('triggerExecution'):.0f}", f"{b.slowest('triggerExecution'):.0f}",
                      f"{b.median('latestOffset') + b.median('getBatch'):.0f}",
                      f"{b.median('addBatch'):.0f}", f"{b.rows():,.0f}", run.machine.describe())
    console.print(table)


if __name__ == "__main__":
    main()

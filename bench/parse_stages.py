"""Where a batch goes: the same demo events through growing prefixes of the pipeline, in one session.

Each stage is one Spark job over the whole topic, timed, and each prints seconds and records per second:
  read             streamfill_kafka, count(*) and sum(length(value));
  read + parse     the orders entry's parse (spark_jobs.pipelines.compile), aggregated in the JVM;
  + to Python      the parsed rows handed to a Python worker as Arrow (what the sink receives), counted there;
  from_json only   the entry's from_json on rows cached in the JVM, without the read;
  typed in read    the same three with the read typing the values (typed_in_read.reader_options, the jobs' way).
The difference between two stages is what the later one adds. Uses end_to_end's topic of demo events
(produced when missing, deleted at the end unless --keep-topic). Needs `streamfill stack up`.

    .venv/bin/python bench/parse_stages.py [--events 2000000] [--partitions 4] [--repeat 2] [--keep-topic]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cleanup import Leftovers, measured
from rich.console import Console
from rich.table import Table
from shared.events_topic import add_topic_args

console = Console()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_topic_args(ap, "--events", "bench_e2e_<events>_<partitions>, shared with end_to_end.py and chunk_cost.py")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per stage, interleaved; the median is reported")
    measured(measure, ap.parse_args())


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    import pyarrow as pa
    from pyspark.sql import functions as F

    from streamfill.connectors.spark import register
    from streamfill.spark_jobs.demo.produce import ensure_topic, produce
    from streamfill.spark_jobs.kafka_read import rows_of
    from streamfill.spark_jobs.pipelines import entry
    from streamfill.spark_jobs.pipelines.envelope import CORRUPT
    from streamfill.spark_jobs.pipelines.typed_in_read import reader_options
    from streamfill.spark_jobs.session import spark_session

    topic = made.topic(f"bench_e2e_{args.events}_{args.partitions}", shared=True)  # the topic end_to_end.py makes
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient({"bootstrap.servers": settings.bootstrap_servers}).list_topics(timeout=10).topics:
        ensure_topic(settings.bootstrap_servers, topic, args.partitions)
        produce(settings.bootstrap_servers, topic, args.events, bad_ratio=0.01, seed=42)
    spark = spark_session("bench-stages", settings, {"spark.ui.enabled": "false",
                                                     "spark.ui.showConsoleProgress": "false"})
    register(spark)
    spec = entry("orders")

    def kafka(typed: bool = False):
        return (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", settings.bootstrap_servers)
                .option("subscribe", topic).options(**(reader_options(spec) if typed else {})).load())

    def in_python(batches):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    fields = sorted({(c.field or name).split(".")[0] for name, c in spec.columns.items()})
    schema = ", ".join(f"`{f}` string" for f in fields) + f", {CORRUPT} string"
    cached = kafka().select("value").cache()
    cached.count()
    stages = {
        "read": lambda: kafka().selectExpr("count(*)", "sum(length(value))").first(),
        "read + parse": lambda: rows_of(spec, kafka()).selectExpr("count(*)", "count(_error)").first(),
        "read + parse + to Python": lambda: rows_of(spec, kafka()).mapInArrow(in_python, "n long")
        .selectExpr("sum(n)").first(),
        "from_json only (cached rows)": lambda: cached.select(
            F.from_json(F.col("value").cast("string"), schema, {"mode": "PERMISSIVE",
                                                                 "columnNameOfCorruptRecord": CORRUPT}).alias("j"))
        .selectExpr(f"count(j.{fields[0]})").first(),
        "read, values typed in the read": lambda: kafka(True).selectExpr("count(*)", "sum(length(value))").first(),
        "read + parse, typed in the read": lambda: rows_of(spec, kafka(True)).selectExpr("count(*)", "count(_error)")
        .first(),
        "read + parse + to Python, typed in the read": lambda: rows_of(spec, kafka(True)).mapInArrow(
            in_python, "n long").selectExpr("sum(n)").first(),
    }
    for fn in stages.values():  # JVM, Python workers, page cache
        fn()
    timings: dict[str, list[float]] = {k: [] for k in stages}
    for _ in range(args.repeat):
        for name, fn in stages.items():
            started = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - started)
    spark.stop()
    table = Table(title=f"{args.events:,} demo events over {args.partitions} partitions (median of {args.repeat})")
    for col in ("stage", "seconds", "records/s"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for name, ts in timings.items():
        seconds = statistics.median(ts)
        table.add_row(name, f"{seconds:.2f}", f"{args.events / seconds:,.0f}")
    console.print(table)


if __name__ == "__main__":
    main()

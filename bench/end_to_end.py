"""Kafka into Postgres end to end: `streamfill stream` against the common hand-written alternative, same run.

  (a) streamfill: streamfill_kafka -> the orders entry's parse (spark_jobs.pipelines) -> streamfill_postgres, exactly-once
      (rows, dead letters and offsets in one transaction per micro-batch), Trigger.AvailableNow;
  (b) the alternative: Spark's format("kafka") -> the same parse -> foreachBatch writing valid rows and
      dead letters with Spark's JDBC writer (batch persisted, default JDBC options), at-least-once;
  (c) `streamfill backfill` of the same whole topic (wall time and offsets/s).
Both streams use the same maxOffsetsPerTrigger, so the batches have the same sizes. Prints offsets per second
and the ratio a/b. Needs `streamfill stack up`; Maven fetches Spark's Kafka source and the JDBC driver once.

    .venv/bin/python bench/end_to_end.py [--events 2000000] [--partitions 4] [--batch 500000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, make_url, text

from spark_jobs import backfill, stream
from spark_jobs.demo.produce import ensure_topic, produce
from spark_jobs.pipelines import entry
from spark_jobs.pipelines.compile import parse
from streamfill.settings import get_settings

console = Console()
HERE = Path(__file__).resolve().parent


def _jars(dest: Path) -> list[str]:
    spec = importlib.util.spec_from_file_location("read_throughput", HERE / "read_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.spark_kafka_jars(dest)


def topic_with_events(bootstrap: str, count: int, partitions: int) -> str:
    """Demo events (1% bad), produced once and kept across runs."""
    topic = f"bench_e2e_{count}_{partitions}"
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        ensure_topic(bootstrap, topic, partitions)
        done = produce(bootstrap, topic, count, bad_ratio=0.01, seed=42)
        console.print(f"produced {done.total:,} events to {topic} in {done.seconds:.1f} s")
    return topic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=500_000, help="maxOffsetsPerTrigger of both streams, chunk size")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per way, interleaved; the median is reported")
    args = ap.parse_args()
    settings = get_settings()
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    topic = topic_with_events(bootstrap, args.events, args.partitions)
    warm = topic_with_events(bootstrap, 20_000, args.partitions)
    jars = _jars(settings.home / "spark-kafka")

    from spark_jobs.session import spark_session

    spark = spark_session("bench-e2e", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                  "spark.ui.showConsoleProgress": "false"})
    u = make_url(url)
    jdbc = f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}"
    props = {"user": u.username or "", "password": u.password or "", "driver": "org.postgresql.Driver"}
    engine = create_engine(url)
    tables: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))

    def streamfill(source: str) -> int:
        name = f"bench_sf_{uuid.uuid4().hex[:8]}"
        tables.append(name)
        summary = stream.run(stream.StreamArgs(name.replace("_", "-"), source, name, work / name, "available-now",
                                               args.batch, pipeline="orders"), spark, bootstrap, url,
                             threading.Event())
        return summary.rows + summary.dead_letters

    def alternative(source: str) -> int:
        name = f"bench_jdbc_{uuid.uuid4().hex[:8]}"
        tables.extend([name, f"{name}_dead"])

        def write(batch, batch_id: int) -> None:
            batch.persist()
            batch.filter("_error IS NULL").drop("_error", "_raw").write.jdbc(jdbc, name, "append", props)
            (batch.filter("_error IS NOT NULL")
             .selectExpr("topic", "partition", "offset", "_raw AS raw_value", "_error AS error")
             .write.jdbc(jdbc, f"{name}_dead", "append", props))
            batch.unpersist()

        kafka = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(args.batch)).load())
        query = (parse(kafka, entry("orders")).writeStream.foreachBatch(write)
                 .option("checkpointLocation", str(work / name)).trigger(availableNow=True).start())
        query.awaitTermination()
        with engine.connect() as conn:
            return sum(conn.scalar(text(f'SELECT count(*) FROM "{t}"')) for t in (name, f"{name}_dead"))

    def backfill_all(source: str) -> int:
        name = f"bench_bf_{uuid.uuid4().hex[:8]}"
        tables.append(name)
        summary = backfill.run(backfill.BackfillArgs(name.replace("_", "-"), source, "earliest", "latest", name,
                                                     chunk_size=args.batch, pipeline="orders"), spark, bootstrap, url)
        return summary.offsets

    ways = {"a streamfill stream (exactly-once)": streamfill,
            "b Spark kafka + foreachBatch JDBC (at-least-once)": alternative,
            "c streamfill backfill (exactly-once)": backfill_all}
    try:
        for fn in ways.values():  # JVM, Python workers, JDBC driver, page cache
            fn(warm)
        timings: dict[str, list[float]] = {k: [] for k in ways}
        counts: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, fn in ways.items():
                started = time.perf_counter()
                counts[name] = fn(topic)
                timings[name].append(time.perf_counter() - started)
                console.print(f"{name}: {counts[name]:,} offsets in {timings[name][-1]:.1f} s")
    finally:
        spark.stop()
        with engine.begin() as conn:
            for t in tables:
                conn.execute(text(f'DROP TABLE IF EXISTS "{t}"'))
        engine.dispose()
    assert len(set(counts.values())) == 1 and args.events in counts.values(), f"the ways disagree: {counts}"
    rate = {name: args.events / statistics.median(ts) for name, ts in timings.items()}
    table = Table(title=f"{args.events:,} events, {args.partitions} partitions, batches of {args.batch:,} "
                        f"(median of {args.repeat})")
    for col in ("way", "seconds", "offsets/s"):
        table.add_column(col, justify="left" if col == "way" else "right")
    for name, ts in timings.items():
        table.add_row(name, f"{statistics.median(ts):.1f}", f"{rate[name]:,.0f}")
    console.print(table)
    a, b, _ = rate.values()
    console.print(f"a/b = {a / b:.2f}  (target >= 1.5)")


if __name__ == "__main__":
    main()

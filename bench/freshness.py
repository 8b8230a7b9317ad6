"""Freshness at a steady rate: how long an event takes from Kafka until a query of the table sees it.

Demo events (1% bad) are produced at a fixed rate (--rate, default 20,000/s) for --seconds (default 180) by
`streamfill produce` in a process of its own, into a stream already running with a 1 s trigger, two ways in the
same run, one after the other, each on a fresh topic and each after a warm-up run of its own (20,000 events):
  (a) `streamfill stream` (exactly-once: rows, dead letters and offsets in one transaction per micro-batch);
  (b) the hand-written alternative: Spark's format("kafka"), the same parse, foreachBatch writing valid rows and
      dead letters with Spark's JDBC writer (at-least-once), into a table made beforehand with an index on
      (topic, partition, offset) so the table can be watched.
A watcher reads every 100 ms, per Kafka partition, the highest offset a query of the table sees (an index
lookup); an offset is visible from the first look that saw it or a higher one (each way writes a partition's
rows of a batch in one transaction). Freshness = visible time - Kafka timestamp (the producer's CreateTime, this
machine's clock), over every 100th offset in the table; prints p50, p99 and the worst of each way, and the rate
the producer kept. Needs `streamfill stack up`. At its end, also when it fails, the run removes its offsets_db
jobs, tables, topics and work folder (bench/leftovers.py).

    .venv/bin/python bench/freshness.py [--rate 20000] [--seconds 180] [--partitions 4]
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, make_url, text

from end_to_end import _jars, jdbc_writer
from leftovers import Leftovers, measured
from streamfill.spark_jobs import stream
from streamfill.spark_jobs.demo.produce import ensure_topic
from streamfill.spark_jobs.pipelines import entry
from streamfill.spark_jobs.pipelines.compile import parse

console = Console()
REPO = Path(__file__).resolve().parents[1]


class Watcher(threading.Thread):
    """Every 100 ms, per partition, the highest offset visible in the table, with the wall-clock time."""

    def __init__(self, url: str, table: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.topic, self.partitions = url, table, topic, partitions
        self.stop = threading.Event()
        self.seen: dict[int, tuple[list[float], list[int]]] = {p: ([], []) for p in range(partitions)}

    def run(self) -> None:
        import psycopg2

        from streamfill.connectors.spark.postgres_sink import dsn

        conn = psycopg2.connect(dsn(self.url))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop.wait(0.1):
                    for p in range(self.partitions):
                        cur.execute(f'SELECT max("offset") FROM "{self.table}" WHERE topic = %s AND partition = %s',
                                    (self.topic, p))
                        top, now = cur.fetchone()[0], time.time()
                        times, offsets = self.seen[p]
                        if top is not None and (not offsets or top > offsets[-1]):
                            times.append(now)
                            offsets.append(top)
        finally:
            conn.close()

    def visible_at(self, partition: int, offset: int) -> float | None:
        times, offsets = self.seen[partition]
        i = bisect.bisect_left(offsets, offset)
        return times[i] if i < len(offsets) else None


def produce(topic: str, rate: int, seconds: int, partitions: int) -> float:
    """`streamfill produce` at `rate` for `seconds` in a process of its own; returns the rate it kept."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "streamfill.app.cli", "produce", "--topic", topic, "--count", str(rate * seconds),
                    "--rate", str(rate), "--partitions", str(partitions), "--bad-ratio", "0.01"], cwd=REPO,
                   check=True, capture_output=True)
    return rate * seconds / (time.monotonic() - started)


def caught_up(engine, table: str, dead: str | None, job: str | None, total: int, timeout: float = 300) -> None:
    """Until every produced offset is in the table or its dead letters."""
    deadline = time.monotonic() + timeout
    while True:
        with engine.connect() as conn:
            rows = conn.scalar(text(f'SELECT count(*) FROM "{table}"'))
            if job is not None:
                letters = conn.scalar(text("SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                           "WHERE j.name = :j"), {"j": job})
            elif conn.scalar(text("SELECT to_regclass(:t)"), {"t": f'"{dead}"'}) is not None:
                letters = conn.scalar(text(f'SELECT count(*) FROM "{dead}"'))
            else:  # its first batch has written valid rows, not yet its dead letters
                letters = 0
        if rows + letters >= total:
            return
        assert time.monotonic() < deadline, f"{table}: {rows + letters:,} of {total:,} offsets after {timeout} s"
        time.sleep(0.5)


def freshness(engine, table: str, topic: str, watcher: Watcher) -> list[float]:
    with engine.connect() as conn:
        sample = conn.execute(text(f'SELECT partition, "offset", extract(epoch FROM kafka_timestamp) FROM "{table}" '
                                   'WHERE topic = :t AND "offset" % 100 = 0'), {"t": topic}).all()
    out = []
    for partition, offset, stamp in sample:
        seen = watcher.visible_at(partition, offset)
        if seen is not None:
            out.append(seen - float(stamp))
    return out


def streamfill_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                   send) -> tuple[Watcher, str, float]:
    """(a): `streamfill stream` with a 1 s trigger on a fresh topic, while `send(topic)` produces; returns the
    watcher, the table and the rate the producer kept, once every offset is in."""
    name = made.table(f"bench_fresh_sf_{uuid.uuid4().hex[:8]}")
    ensure_topic(bootstrap, made.topic(name), partitions)
    stop = threading.Event()
    job = made.job(name.replace("_", "-"))
    runner = threading.Thread(target=stream.run, daemon=True, args=(
        stream.StreamArgs(job, name, name, work / name, "1s", pipeline="orders"), spark,
        {"bootstrap.servers": bootstrap}, url, stop))
    runner.start()
    while not spark.streams.active:
        time.sleep(0.2)
    watcher = Watcher(url, name, name, partitions)
    watcher.start()
    kept, total = send(name)
    caught_up(engine, name, None, job, total)
    watcher.stop.set()
    stop.set()
    runner.join(120)
    return watcher, name, kept


def alternative_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                    send) -> tuple[Watcher, str, float]:
    """(b): format("kafka"), the same parse, foreachBatch JDBC with a 1 s trigger, into a table made beforehand
    with an index on (topic, partition, offset), while `send(topic)` produces."""
    from streamfill.connectors.spark.pg_types import pg_type

    name = f"bench_fresh_jdbc_{uuid.uuid4().hex[:8]}"
    made.table(name, f"{name}_dead")
    ensure_topic(bootstrap, made.topic(name), partitions)
    u = make_url(url)
    jdbc = f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}"
    props = {"user": u.username or "", "password": u.password or "", "driver": "org.postgresql.Driver"}
    kafka = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", name).option("startingOffsets", "earliest").load())
    parsed = parse(kafka, entry("orders"))
    fields = [f for f in parsed.schema.fields if f.name not in ("_error", "_raw")]
    with engine.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{name}" (' + ", ".join(f'"{f.name}" {pg_type(f.name, f.dataType)}'
                                                                 for f in fields) + ")"))
        conn.execute(text(f'CREATE INDEX ON "{name}" (topic, partition, "offset")'))
    query = (parsed.writeStream.foreachBatch(jdbc_writer(jdbc, name, props))
             .option("checkpointLocation", str(work / name)).trigger(processingTime="1 second").start())
    watcher = Watcher(url, name, name, partitions)
    watcher.start()
    kept, total = send(name)
    caught_up(engine, name, f"{name}_dead", None, total)
    watcher.stop.set()
    query.stop()
    return watcher, name, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=20_000, help="events per second")
    ap.add_argument("--seconds", type=int, default=180, help="how long the producer runs")
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    measured(measure, args)


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    work = made.folder(Path(tempfile.mkdtemp(prefix="bench-fresh-")))

    from streamfill.spark_jobs.session import spark_session

    spark = spark_session("bench-fresh", settings, {"spark.jars": ",".join(_jars(settings.home / "spark-kafka")),
                                                    "spark.ui.enabled": "false",
                                                    "spark.ui.showConsoleProgress": "false"})
    engine = create_engine(url)
    ways = {"a streamfill stream (exactly-once), trigger 1 s": streamfill_way,
            "b Spark kafka + foreachBatch JDBC (at-least-once), trigger 1 s": alternative_way}
    results: dict[str, tuple[list[float], float]] = {}
    try:
        for way in ways.values():  # JVM, Python workers, JDBC driver: each way warm before it is measured
            way(spark, bootstrap, url, engine, work, made, args.partitions,
                lambda topic: (produce(topic, 20_000, 1, args.partitions), 20_000))
        for label, way in ways.items():
            watcher, name, kept = way(spark, bootstrap, url, engine, work, made, args.partitions,
                                      lambda topic: (produce(topic, args.rate, args.seconds, args.partitions),
                                                     args.rate * args.seconds))
            results[label] = (freshness(engine, name, name, watcher), kept)
    finally:
        spark.stop()
        engine.dispose()

    table = Table(title=f"freshness: {args.rate:,} events/s for {args.seconds} s, {args.partitions} partitions "
                        "(visible in the table - Kafka timestamp, every 100th offset)")
    for col in ("way", "p50 s", "p99 s", "worst s", "sampled", "rate kept (events/s)"):
        table.add_column(col, justify="left" if col == "way" else "right")
    for label, (lags, kept) in results.items():
        cuts = statistics.quantiles(lags, n=100)
        table.add_row(label, f"{cuts[49]:.2f}", f"{cuts[98]:.2f}", f"{max(lags):.2f}", f"{len(lags):,}",
                      f"{kept:,.0f}")
    console.print(table)


if __name__ == "__main__":
    main()

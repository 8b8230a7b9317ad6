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
Python workers, and the backlog they leave takes a while to drain). Per way: p50, p99 and the worst; the p50 of the last 10 s (above the p50, the way fell behind);
the rate the producer kept; the median micro-batch (Spark's durationMs: the whole trigger, the read's planning,
addBatch), the slowest and the rows per batch; the machine during the run (CPU busy and stolen, from /proc/stat; the load average). Needs `streamfill
stack up`. At its end, also when it fails, the run removes its offsets_db jobs, tables, topics and work folder.

    .venv/bin/python bench/freshness.py [--rates 20000,50000] [--triggers 1s,100ms] [--seconds 120] [--settle 30]
        [--ways ab]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
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

console = Console(width=220)
HERE = Path(__file__).resolve().parent
LOOK_S = 0.05
WARM_UP = (20_000, 2)  # events per second, seconds


class Watcher(threading.Thread):
    """Every LOOK_S, per partition, the highest offset visible in the table, with the wall-clock time."""

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
        query = (f'SELECT p, (SELECT max("offset") FROM "{self.table}" WHERE topic = %s AND partition = p) '
                 "FROM generate_series(0, %s) p")
        try:
            with conn.cursor() as cur:
                while not self.stop.wait(LOOK_S):
                    cur.execute(query, (self.topic, self.partitions - 1))
                    now = time.time()
                    for p, top in cur.fetchall():
                        times, offsets = self.seen[p]
                        if top is not None and (not offsets or top > offsets[-1]):
                            times.append(now)
                            offsets.append(top)
        finally:
            conn.close()

    def visible_at(self, partition: int, offset: int) -> float | None:
        import bisect

        times, offsets = self.seen[partition]
        i = bisect.bisect_left(offsets, offset)
        return times[i] if i < len(offsets) else None


class Machine:
    """CPU busy and stolen (from /proc/stat) and the 1-minute load average over a stretch of time."""

    def __enter__(self) -> Machine:
        self.before = self._ticks()
        return self

    def __exit__(self, *exc) -> None:
        after = self._ticks()
        delta = [a - b for a, b in zip(after, self.before)]
        total = sum(delta) or 1
        idle = delta[3] + delta[4]
        self.busy, self.steal = (total - idle) / total, delta[7] / total
        self.load = float(Path("/proc/loadavg").read_text().split()[0])

    @staticmethod
    def _ticks() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]

    def describe(self) -> str:
        return f"{self.busy:.0%} busy, {self.steal:.0%} stolen, load {self.load:.1f}"


@dataclass
class Batches:
    """The micro-batches a way ran (Spark's progress events), each once."""

    progress: dict[int, dict] = field(default_factory=dict)

    def add(self, event: dict) -> None:
        if event["numInputRows"] and "addBatch" in event["durationMs"]:
            self.progress[event["batchId"]] = event

    def median(self, key: str) -> float:
        values = [p["durationMs"].get(key, 0) for p in self.progress.values()]
        return statistics.median(values) if values else 0.0

    def slowest(self, key: str) -> float:
        return max((p["durationMs"].get(key, 0) for p in self.progress.values()), default=0.0)

    def rows(self) -> float:
        values = [p["numInputRows"] for p in self.progress.values()]
        return statistics.median(values) if values else 0.0


@dataclass
class Run:
    lags: list[tuple[float, float]]  # (Kafka timestamp, freshness) of every 100th offset
    sent: dict
    batches: Batches
    machine: Machine
    began: float  # when the producer started (wall clock)
    settle: float

    def steady(self) -> list[float]:
        return [lag for stamp, lag in self.lags if stamp >= self.began + self.settle]

    def last(self, seconds: float = 10) -> list[float]:
        end = max(stamp for stamp, _ in self.lags)
        return [lag for stamp, lag in self.lags if stamp >= end - seconds]


def paced(topic: str, rate: int, seconds: float, partitions: int) -> tuple[dict, float]:
    """bench/paced_producer.py in a process of its own; what it printed and when (wall clock) it started."""
    proc = subprocess.Popen([sys.executable, str(HERE / "paced_producer.py"), "--topic", topic, "--rate", str(rate),
                             "--seconds", str(seconds), "--partitions", str(partitions)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the producer failed: {err.strip()[-2000:]}")
    sent = json.loads(out.strip().splitlines()[-1])
    return sent, sent["seconds"]


def caught_up(engine, table: str, dead: str | None, job: str | None, total: int, poll=lambda: None,
              timeout: float = 600) -> None:
    """Until every produced offset is in the table or its dead letters."""
    deadline = time.monotonic() + timeout
    while True:
        poll()
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


def freshness(engine, table: str, topic: str, watcher: Watcher) -> list[tuple[float, float]]:
    with engine.connect() as conn:
        sample = conn.execute(text(f'SELECT partition, "offset", extract(epoch FROM kafka_timestamp) FROM "{table}" '
                                   'WHERE topic = :t AND "offset" % 100 = 0'), {"t": topic}).all()
    out = []
    for partition, offset, stamp in sample:
        seen = watcher.visible_at(partition, offset)
        if seen is not None:
            out.append((float(stamp), seen - float(stamp)))
    return out


def measured_run(engine, name: str, partitions: int, rate: int, seconds: float, settle: float, url: str,
                 batches: Batches, wait) -> Run:
    """Produce into `name` while the way runs; `wait(total)` returns once every offset landed."""
    watcher = Watcher(url, name, name, partitions)
    watcher.start()
    with Machine() as machine:
        began = time.time()
        sent, _ = paced(name, rate, seconds, partitions)
        wait(sent["sent"])
    watcher.stop.set()
    watcher.join(5)
    return Run(freshness(engine, name, name, watcher), sent, batches, machine, began, settle)


def streamfill_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                   trigger: str, rate: int, seconds: float, settle: float = 0) -> Run:
    """(a): `streamfill stream` on a fresh topic, while the producer sends."""
    name = made.table(f"bench_fresh_sf_{uuid.uuid4().hex[:8]}")
    ensure_topic(bootstrap, made.topic(name), partitions)
    stop = threading.Event()
    job = made.job(name.replace("_", "-"))
    batches = Batches()
    runner = threading.Thread(target=stream.run, daemon=True, args=(
        stream.StreamArgs(job, name, name, work / name, trigger, pipeline="orders"), spark,
        {"bootstrap.servers": bootstrap}, url, stop, batches.add))
    runner.start()
    while not spark.streams.active:
        time.sleep(0.2)
    try:
        return measured_run(engine, name, partitions, rate, seconds, settle, url, batches,
                            lambda total: caught_up(engine, name, None, job, total))
    finally:
        stop.set()
        runner.join(120)


def alternative_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                    trigger: str, rate: int, seconds: float, settle: float = 0) -> Run:
    """(b): format("kafka"), the same parse, foreachBatch JDBC, into a table made beforehand with an index on
    (topic, partition, offset), while the producer sends."""
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
             .option("checkpointLocation", str(work / name))
             .trigger(**stream.parse_trigger(trigger)).start())
    batches = Batches()

    def poll() -> None:
        for event in query.recentProgress:
            batches.add(event)

    try:
        return measured_run(engine, name, partitions, rate, seconds, settle, url, batches,
                            lambda total: caught_up(engine, name, f"{name}_dead", None, total, poll))
    finally:
        poll()
        query.stop()


WAYS = {"a": ("streamfill stream (exactly-once)", streamfill_way),
        "b": ("Spark kafka + foreachBatch JDBC (at-least-once)", alternative_way)}


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
        stream.parse_trigger(trigger)
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

    spark = spark_session("bench-fresh", settings, {"spark.jars": ",".join(_jars(settings.home / "spark-kafka")),
                                                    "spark.ui.enabled": "false",
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


def quantile(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100)[percent - 1] if len(values) > 1 else float("nan")


if __name__ == "__main__":
    main()

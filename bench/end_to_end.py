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
(compile.reader_options) and Spark's from_json for the rest. The benchmark checks that (a), (b), (c), (d) and (f)
wrote equal tables and dead letters. Prints offsets per
second, the ratios to (b) and to (f), and the peak RSS of the driver (JVM and Python) and of the Python workers
(the sum over workers at the peak sample).
With --contended, each way also runs again while users use its table: once the table exists, an analyst's
REPEATABLE READ transaction reads it and stays open until the way ends (holding its lock on the table), and a
dashboard's short query runs every half second; the run's time and the dashboard's worst wait are reported
beside the way's time alone.
Repeats are interleaved; the median is reported. Needs `streamfill stack up`; Maven fetches Spark's Kafka
source and the JDBC driver once. At its end, also when it fails, the run removes its offsets_db jobs, tables and
work folder (bench/leftovers.py), and its topics of events unless --keep-topic.

    .venv/bin/python bench/end_to_end.py [--events 2000000] [--partitions 4] [--batch 500000] [--repeat 3]
                                         [--ways abcdefg] [--contended] [--keep-topic]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, make_url, text

from leftovers import Leftovers, add_keep_topic, measured
from streamfill.spark_jobs import backfill, stream
from streamfill.spark_jobs.demo.produce import ensure_topic, produce
from streamfill.spark_jobs.pipelines import entry
from streamfill.spark_jobs.pipelines.compile import parse, reader_options
from streamfill.spark_jobs.pipelines.jobs_file import jobs_file

console = Console()
HERE = Path(__file__).resolve().parent
# compared across ways; event_time as epoch seconds (JDBC's table has timestamp, streamfill's timestamptz)
COLUMNS = ('topic', 'partition', '"offset"', "event_id", "user_id", "event_type", "amount", "currency",
           "extract(epoch FROM event_time)")


def copy_straight(spark, bootstrap: str, source: str, url: str, name: str, spec) -> int:
    """The raw ceiling: the same read and parse, each task COPYing (binary) its valid rows straight into an
    indexed table and its dead letters into another; nothing staged, no offsets, no exactly-once."""
    import psycopg2
    from pyspark.sql import functions as F

    from streamfill.connectors.spark.pg_types import pg_type
    from streamfill.connectors.spark.postgres_sink import dsn

    kafka = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .options(**reader_options(spec)).load())
    parsed = parse(kafka, spec)
    fields = [f for f in parsed.schema.fields if f.name not in ("_error", "_raw")]
    names = [f.name for f in fields]
    conninfo = dsn(url)
    with psycopg2.connect(conninfo) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{name}" (' + ", ".join(f'"{f.name}" {pg_type(f.name, f.dataType)}' for f in fields)
                    + ', UNIQUE (topic, "partition", "offset"))')
        cur.execute(f'CREATE TABLE "{name}_dead" (topic text, "partition" integer, "offset" bigint, raw_value bytea, '
                    "error text)")

    def task(batches):
        import itertools

        import psycopg2
        import pyarrow as pa
        import pyarrow.compute as pc

        from streamfill.connectors.postgres import copy

        dead, seen = [], [0]

        def valid():
            for b in batches:
                seen[0] += b.num_rows
                bad = pc.is_valid(b.column("_error"))
                if pc.any(bad).as_py():
                    d = b.filter(bad)
                    dead.append(pa.record_batch([d.column(c) for c in ("topic", "partition", "offset", "_raw",
                                                                       "_error")],
                                                names=["topic", "partition", "offset", "raw_value", "error"]))
                yield b.filter(pc.invert(bad))

        conn = psycopg2.connect(conninfo)
        with conn.cursor() as cur:
            for table, cols, source_ in ((name, names, valid()), (f"{name}_dead",
                                         ["topic", "partition", "offset", "raw_value", "error"], None)):
                chunks = copy.encode(source_ if source_ is not None else iter(dead), cols, None)
                first = next(chunks, None)
                if first is not None:
                    columns = ", ".join(f'"{c}"' for c in cols)
                    cur.copy_expert(f'COPY "{table}" ({columns}) FROM STDIN WITH (FORMAT binary)',
                                    copy.CopySource(itertools.chain([first], chunks)))
        conn.commit()
        conn.close()
        yield pa.record_batch({"n": pa.array([seen[0]], pa.int64())})

    return parsed.mapInArrow(task, "n long").agg(F.sum("n")).first()[0]


def jdbc_writer(jdbc: str, name: str, props: dict[str, str]):
    """The hand-written way's foreachBatch: valid rows to `name`, dead letters to `name`_dead, by Spark's JDBC
    writer (at-least-once: a batch replayed after a failure is written again)."""
    def write(batch, batch_id: int) -> None:
        batch.persist()
        batch.filter("_error IS NULL").drop("_error", "_raw").write.jdbc(jdbc, name, "append", props)
        (batch.filter("_error IS NOT NULL")
         .selectExpr("topic", "partition", "offset", "_raw AS raw_value", "_error AS error")
         .write.jdbc(jdbc, f"{name}_dead", "append", props))
        batch.unpersist()

    return write


def _jars(dest: Path) -> list[str]:
    spec = importlib.util.spec_from_file_location("read_throughput", HERE / "read_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.spark_kafka_jars(dest)


def add_topic_args(ap: argparse.ArgumentParser) -> None:
    """--events and --partitions: the topic of demo events the benchmarks share (topic_with_events); and
    --keep-topic."""
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    add_keep_topic(ap, "bench_e2e_<events>_<partitions>")


def topic_with_events(bootstrap: str, count: int, partitions: int, made: Leftovers) -> str:
    """Demo events (1% bad), produced once and reused by later runs while kept (--keep-topic). Recorded in
    `made` before it is produced, so a run failing halfway does not leave a short topic for the next to reuse."""
    topic = made.topic(f"bench_e2e_{count}_{partitions}", shared=True)
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        ensure_topic(bootstrap, topic, partitions)
        done = produce(bootstrap, topic, count, bad_ratio=0.01, seed=42)
        console.print(f"produced {done.total:,} events to {topic} in {done.seconds:.1f} s")
    return topic


class PeakRss:
    """The peak RSS of the driver's Python (this process), its JVM and the Python workers while the block runs,
    sampled every 0.2 s by bench/peak_rss.py in a process of its own."""

    def __enter__(self) -> PeakRss:
        self._sampler = subprocess.Popen([sys.executable, str(HERE / "peak_rss.py"), str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self._sampler.communicate("")  # closing its stdin ends the sampling
        self.peak = json.loads(out.splitlines()[-1])


class Users:
    """While a way runs: once its table exists, an analyst's transaction that read it stays open (holding its
    lock on the table) and a dashboard's short query runs every half second. `worst` is that query's longest
    time, lock waits included."""

    def __init__(self, url: str, table_of) -> None:
        self.url, self.table_of = url, table_of
        self.stop, self.worst, self.probes = threading.Event(), 0.0, 0

    def __enter__(self) -> Users:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        import psycopg2

        from streamfill.connectors.spark.postgres_sink import dsn

        analyst, dashboard = psycopg2.connect(dsn(self.url)), psycopg2.connect(dsn(self.url))
        analyst.set_session(isolation_level="REPEATABLE READ")
        dashboard.autocommit = True
        holding = False
        try:
            while not self.stop.wait(0.5):
                table = self.table_of()
                if table is None:
                    continue
                with dashboard.cursor() as cur:
                    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{table}"',))
                    if not cur.fetchone()[0]:
                        continue
                    if not holding:
                        with analyst.cursor() as held:
                            held.execute(f'SELECT 1 FROM "{table}" LIMIT 1')
                        holding = True
                    started = time.perf_counter()
                    cur.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{table}" LIMIT 10) s')
                    cur.fetchone()
                    self.worst = max(self.worst, time.perf_counter() - started)
                    self.probes += 1
        finally:
            analyst.close()
            dashboard.close()


DELETE_EVERY = 20  # way (g): a tombstone for every 20th event, after all of them


def topic_with_deletes(bootstrap: str, count: int, partitions: int, made: Leftovers) -> tuple[str, int]:
    """The events of topic_with_events keyed by event_id, then a tombstone for every DELETE_EVERY-th valid
    one; returns the topic and its record count."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from streamfill.spark_jobs.demo.events import records

    topic = made.topic(f"bench_e2e_deletes_{count}_{partitions}", shared=True)
    doomed = [key for i, (key, _, bad) in enumerate(records(count, 0.01, 42, "event_id"))
              if not bad and i % DELETE_EVERY == 0]
    if topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        ensure_topic(bootstrap, topic, partitions)
        produce(bootstrap, topic, count, bad_ratio=0.01, seed=42, key_field="event_id")
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for key in doomed:
            producer.produce(topic, key=key, value=None)
            producer.poll(0)
        producer.flush(60)
        console.print(f"produced {count:,} events keyed by event_id and {len(doomed):,} tombstones to {topic}")
    return topic, count + len(doomed)


def upsert_jobs_file(work: Path) -> Path:
    """The jobs file with `orders_upsert`, the orders entry keyed by event_id in mode replace, and
    `orders_deletes`, the same with tombstones deleting."""
    doc = yaml.safe_load(jobs_file().read_text())
    upsert = dict(doc["jobs"]["orders"])
    upsert.update(key=["event_id"], mode="replace", table="orders_upsert")
    for k in ("interval_table", "schedule", "quality_schedule", "health"):
        upsert.pop(k, None)
    doc["jobs"] = {"orders": doc["jobs"]["orders"], "orders_upsert": upsert,
                   "orders_deletes": {**upsert, "table": "orders_deletes", "deletes": "tombstone"}}
    path = work / "jobs" / "streamfill_jobs.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(doc))
    return path


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
    jars = _jars(settings.home / "spark-kafka")
    work = made.folder(Path(tempfile.mkdtemp(prefix="bench-e2e-")))
    os.environ["STREAMFILL_JOBS_FILE"] = str(upsert_jobs_file(work))

    from streamfill.spark_jobs.session import spark_session

    spark = spark_session("bench-e2e", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                  "spark.ui.showConsoleProgress": "false"})
    u = make_url(url)
    jdbc = f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}"
    props = {"user": u.username or "", "password": u.password or "", "driver": "org.postgresql.Driver"}
    engine = create_engine(url)
    tables = made.tables
    written: dict[str, tuple[str, str]] = {}  # way -> (table, dead letters: a table or a job's name)
    current: dict[str, str] = {}  # the table the running way writes, for the users of --contended

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
                    with Users(url, lambda: current.get("table")) as users:
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
    rate = {k: (deleting_count if k == "g" else args.events) / statistics.median(ts) for k, ts in timings.items()}
    table = Table(title=f"{args.events:,} events, {args.partitions} partitions, batches of {args.batch:,} "
                        f"(median of {args.repeat}, interleaved)")
    columns = ["way", "seconds", "offsets/s", "vs b", "vs f"]
    if args.contended:
        columns += ["seconds, table held by a reader", "probe's worst wait (s)"]
    for col in (*columns, "peak RSS driver JVM / python / workers (MB)"):
        table.add_column(col, justify="left" if col == "way" else "right")
    for k, ts in timings.items():
        mb = peaks[k]
        held = [f"{statistics.median(contended[k]):.1f}", f"{worst[k]:.3f}"] if args.contended else []
        table.add_row(ways[k][0], f"{statistics.median(ts):.1f}", f"{rate[k]:,.0f}",
                      f"{rate[k] / rate['b']:.2f}" if "b" in rate else "-",
                      f"{rate[k] / rate['f']:.2f}" if "f" in rate else "-", *held,
                      f"{mb['driver JVM'] / 2**20:,.0f} / {mb['driver python'] / 2**20:,.0f} / "
                      f"{mb['python workers'] / 2**20:,.0f}")
    console.print(table)
    if same:
        console.print(f"same rows and dead letters in {', '.join(same)}; parsers: b Spark's from_json and casts "
                      "alone, the others values typed in the read where certain and Spark's from_json for the rest "
                      "(spark_jobs.pipelines.compile, reader_options)")
    for k, target in (("a", 1.5), ("c", 1.5), ("e", None)):
        if k in rate and "b" in rate:
            console.print(f"{k}/b = {rate[k] / rate['b']:.2f}" + (f"  (target >= {target})" if target else ""))
    if "d" in rate and "c" in rate:
        console.print(f"d/c = {rate['d'] / rate['c']:.2f}  (target >= 0.70)")
    if "g" in rate and "e" in rate:
        console.print(f"g/e = {rate['g'] / rate['e']:.2f}  (offsets per second, upsert with deletes against plain "
                      "upserts)")
    if "f" in rate and "a" in rate:
        console.print(f"a/f = {rate['a'] / rate['f']:.2f}  (aim >= 0.5: the exactly-once path against the raw ceiling)")


def check_deletes(engine, written: dict[str, tuple[str, str]], deleted: int) -> None:
    """Way (g)'s table holds the upserts' rows (way (e), when it ran) less the `deleted` keys."""
    if "e" not in written:
        return
    with engine.connect() as conn:
        upserted = conn.scalar(text(f'SELECT count(*) FROM "{written["e"][0]}"'))
        kept = conn.scalar(text(f'SELECT count(*) FROM "{written["g"][0]}"'))
    assert kept == upserted - deleted, f"way g kept {kept:,} rows: the upserts' {upserted:,} less {deleted:,} deleted"


def compare(engine, written: dict[str, tuple[str, str]], ways: list[str]) -> list[str]:
    """The ways' tables hold the same rows, and their dead letters the same offsets and reasons."""
    cols = ", ".join(COLUMNS)
    digests = {}
    with engine.connect() as conn:
        for k in ways:
            table, dead = written[k]
            rows = conn.scalar(text(f'SELECT md5(string_agg(({cols})::text, \',\' ORDER BY topic, partition, "offset")) '
                                    f'FROM "{table}"'))
            if dead.startswith("job:"):
                letters = conn.scalar(text(
                    "SELECT md5(string_agg((d.topic, d.partition, d.\"offset\", d.error)::text, ',' ORDER BY d.topic, "
                    'd.partition, d."offset")) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j'),
                    {"j": dead[4:]})
            else:
                letters = conn.scalar(text(
                    f'SELECT md5(string_agg((topic, partition, "offset", error)::text, \',\' ORDER BY topic, partition, '
                    f'"offset")) FROM "{dead}"'))
            digests[k] = (rows, letters)
    assert len(set(digests.values())) == 1, f"the ways wrote different rows or dead letters: {digests}"
    return ways


if __name__ == "__main__":
    main()

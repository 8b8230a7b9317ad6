"""Read throughput: streamfill_kafka vs a bare confluent-kafka consumer vs Spark's own Kafka source.

Produces N JSON messages once (kept across runs), then reads the whole topic five ways in the same run:
  (a) a bare confluent-kafka consumer in a process of its own (bench/bare_consumer.py): the ceiling on this
      machine, timed from its first call to the broker, without the interpreter's start;
  (b) streamfill_kafka through spark.read, computing count(*) and sum(length(value));
  (c) Spark's built-in Kafka source (format("kafka")), same aggregate, same session;
  (d) the Python data source API's own ceiling on this machine: a data source whose tasks yield the same number of
      rows, with Spark's Kafka schema and real records of the topic, as Arrow batches already built (a sample of
      the topic read once on the driver, handed to each task), so no task reads Kafka or builds a column. What
      it costs is Spark's share of any Python data source: the tasks, the Arrow hand-over and the JVM's rows. No
      reader of this API can beat d, so d/a bounds b/a;
  (e) the same source calling confluent-kafka's consume() (the reader's kept consumer) for each batch it yields,
      so its tasks pay the client's work per record and build no column: e/a bounds b/a for any reader on
      confluent-kafka, and b/e is what building the columns keeps of it.
d and e yield sample rows, so only their counts are checked. Prints messages per second for each and the ratios.
Needs `streamfill stack up`. At its end, also when it fails, the run deletes its topic unless --keep-topic.

    .venv/bin/python bench/read_throughput.py [--messages 2000000] [--partitions 4] [--repeat 2] [--keep-topic]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cleanup import Leftovers, measured
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table
from shared.events_topic import add_topic_args
from shared.spark_kafka import spark_kafka_jars

from streamfill.connectors.kafka.reader import FETCH_DEFAULTS

console = Console()


def ensure_topic(bootstrap: str, topic: str, messages: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    rnd = random.Random(7)
    started = time.monotonic()
    for i in range(messages):
        value = json.dumps({"event_id": i, "user_id": rnd.randrange(100_000), "event_type": "order_placed",
                            "amount": round(rnd.uniform(1, 500), 2), "currency": "EUR"}).encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 100_000 == 0:
            producer.poll(0)
    producer.flush(120)
    console.print(f"produced {messages:,} messages in {time.monotonic() - started:.1f} s")


def bare_consumer(bootstrap: str, topic: str, partitions: int) -> tuple[int, int, float]:
    """Way (a), in a process of its own (bench/bare_consumer.py); returns messages, bytes and the read's seconds."""
    # the same fetch settings as streamfill's reader, so (a) is the ceiling for this client, not a handicap
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("bare_consumer.py")),
                           "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions),
                           "--config", json.dumps(FETCH_DEFAULTS)], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.splitlines()[-1])
    return out["messages"], out["bytes"], out["seconds"]


SAMPLE_ROWS = 20_000  # one reader batch (connectors.kafka.reader.BATCH_SIZE)


def handover_source(bootstrap: str, topic: str, partitions: int):
    """Way (d)'s data source: per partition, its message count in slices of a sample of real records."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from streamfill.connectors.kafka.planner import OffsetRange
    from streamfill.connectors.kafka.reader import consumer_for, read_range
    from streamfill.connectors.spark.source import SCHEMA

    kafka = {"bootstrap.servers": bootstrap, **FETCH_DEFAULTS}
    admin = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    ends = [admin.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    admin.close()
    sample = pa.Table.from_batches(list(read_range(OffsetRange(topic, 0, 0, min(SAMPLE_ROWS, ends[0])), kafka)))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sample.schema) as out:
        out.write_table(sample)
    ipc = sink.getvalue().to_pybytes()

    class HandOverReader(DataSourceReader):
        def __init__(self, consume: bool) -> None:
            self.consume = consume

        def partitions(self):
            return [InputPartition((ipc, p, n)) for p, n in enumerate(ends)]

        def read(self, partition):
            ipc_bytes, p, n = partition.value
            batch = pa.ipc.open_stream(ipc_bytes).read_all().combine_chunks().to_batches()[0]
            if not self.consume:
                while n > 0:
                    yield batch.slice(0, min(n, batch.num_rows))
                    n -= batch.num_rows
                return
            # way (e): the client's own work, each consume() batch replaced by as many sample rows
            from confluent_kafka import TopicPartition as KafkaTopicPartition  # by reference, not pickled

            consumer = consumer_for(kafka)  # the reader's own consumer, kept in the worker as b keeps it
            consumer.assign([KafkaTopicPartition(topic, p, 0)])
            while n > 0:
                got = len(consumer.consume(min(n, batch.num_rows), 1.0))
                if got:
                    yield batch.slice(0, got)
                    n -= got
            consumer.unassign()

    class HandOver(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_handover"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema):
            return HandOverReader(self.options.get("consume") == "true")

    return HandOver


def timed(read: Callable[[], tuple[int, int]]) -> Callable[[], tuple[int, int, float]]:
    def run() -> tuple[int, int, float]:
        started = time.perf_counter()
        count, size = read()
        return count, size, time.perf_counter() - started
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_topic_args(ap, "--messages", "bench_read_<messages>_<partitions>")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per way; the median is reported")
    measured(measure, ap.parse_args())


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    bootstrap = settings.bootstrap_servers
    # recorded before it is produced, so a run failing halfway does not leave a short topic for the next to reuse
    topic = made.topic(f"bench_read_{args.messages}_{args.partitions}", shared=True)
    ensure_topic(bootstrap, topic, args.messages, args.partitions)
    jars = spark_kafka_jars(settings.home / "spark-kafka")

    from streamfill.connectors.spark import register
    from streamfill.spark_jobs.session import spark_session

    spark = spark_session("bench-read", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                   "spark.ui.showConsoleProgress": "false"})
    register(spark)
    spark.dataSource.register(handover_source(bootstrap, topic, args.partitions))

    def ours() -> tuple[int, int]:
        row = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).load().selectExpr("count(*)", "sum(length(value))").first())
        return row[0], row[1]

    def builtin() -> tuple[int, int]:
        row = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").load()
               .selectExpr("count(*)", "sum(length(value))").first())
        return row[0], row[1]

    def handover(consume: bool) -> Callable[[], tuple[int, int]]:
        def run() -> tuple[int, int]:
            row = (spark.read.format("bench_handover").option("consume", str(consume).lower()).load()
                   .selectExpr("count(*)", "sum(length(value))").first())
            return row[0], row[1]
        return run

    ways = {"a bare confluent-kafka consumer": lambda: bare_consumer(bootstrap, topic, args.partitions),
            "b streamfill_kafka (spark.read)": timed(ours),
            "c Spark's format('kafka')": timed(builtin),
            "d the data source API's ceiling (no Kafka)": timed(handover(False)),
            "e confluent-kafka's consume() alone through the API": timed(handover(True))}
    for fn in (ours, builtin, handover(False), handover(True)):  # warm the JVM, the Python workers and the page cache
        fn()
    timings: dict[str, list[float]] = {k: [] for k in ways}
    results = {}
    for _ in range(args.repeat):
        for name, fn in ways.items():  # interleaved, so load on the machine hits each way alike
            count, size, seconds = fn()
            results[name] = count, size
            timings[name].append(seconds)
    spark.stop()
    # d and e yield sample rows, so only their counts compare
    ceilings = [results.pop(name)[0] for name in list(results)[3:]]
    assert len(set(results.values())) == 1, f"the three readers disagree: {results}"
    count = results["a bare confluent-kafka consumer"][0]
    assert set(ceilings) == {count}, f"the ceilings' sources gave {ceilings} rows, not {count:,}"
    rate = {name: count / statistics.median(ts) for name, ts in timings.items()}
    table = Table(title=f"reading {count:,} messages over {args.partitions} partitions (median of {args.repeat})")
    table.add_column("way")
    table.add_column("seconds", justify="right")
    table.add_column("messages/s", justify="right")
    for name, ts in timings.items():
        table.add_row(name, f"{statistics.median(ts):.2f}", f"{rate[name]:,.0f}")
    console.print(table)
    a, b, c, d, e = rate.values()
    console.print(f"b/a = {b / a:.2f}  (target >= 1.2)")
    console.print(f"b/c = {b / c:.2f}  (target >= 1.5)")
    console.print(f"d/a = {d / a:.2f}  (the most any Python data source's b/a can be on this machine)")
    console.print(f"e/a = {e / a:.2f}  (the most b/a can be with confluent-kafka's consume(), no column built)")
    console.print(f"b/e = {b / e:.2f}  (what of that the reader keeps while building its columns)")


if __name__ == "__main__":
    main()

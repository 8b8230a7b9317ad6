"""Read throughput: streamfill_kafka vs a bare confluent-kafka consumer vs Spark's own Kafka source.

Produces N JSON messages once (kept across runs), then reads the whole topic three ways in the same run:
  (a) a bare confluent-kafka consumer in a process of its own (bench/bare_consumer.py): the ceiling on this
      machine, timed from its first call to the broker, without the interpreter's start;
  (b) streamfill_kafka through spark.read, computing count(*) and sum(length(value));
  (c) Spark's built-in Kafka source (format("kafka")), same aggregate, same session.
Prints messages per second for each and the ratios b/a and b/c. Needs `streamfill stack up`.

    .venv/bin/python bench/read_throughput.py [--messages 2000000] [--partitions 4] [--repeat 2]
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from connectors.kafka.reader import FETCH_DEFAULTS
from streamfill import REPO_ROOT
from streamfill.settings import get_settings

console = Console()
POM = REPO_ROOT / "bench" / "spark-kafka" / "pom.xml"
KAFKA_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2",
              "postgresql")


def spark_kafka_jars(dest: Path) -> list[str]:
    if not (dest / ".complete").exists() or not list(dest.glob("postgresql-*.jar")):
        console.print(f"fetching Spark's Kafka source with Maven into {dest}")
        subprocess.run(["mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
                        "-DincludeScope=runtime", f"-DoutputDirectory={dest}"], check=True)
        (dest / ".complete").touch()
    return sorted(str(p) for p in dest.glob("*.jar") if p.name.startswith(KAFKA_JARS))


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


def timed(read: Callable[[], tuple[int, int]]) -> Callable[[], tuple[int, int, float]]:
    def run() -> tuple[int, int, float]:
        started = time.perf_counter()
        count, size = read()
        return count, size, time.perf_counter() - started
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per way; the median is reported")
    args = ap.parse_args()
    settings = get_settings()
    bootstrap = settings.bootstrap_servers
    topic = f"bench_read_{args.messages}_{args.partitions}"
    ensure_topic(bootstrap, topic, args.messages, args.partitions)
    jars = spark_kafka_jars(settings.home / "spark-kafka")

    from connectors.spark import register
    from spark_jobs.session import spark_session

    spark = spark_session("bench-read", settings, {"spark.jars": ",".join(jars), "spark.ui.enabled": "false",
                                                   "spark.ui.showConsoleProgress": "false"})
    register(spark)

    def ours() -> tuple[int, int]:
        row = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).load().selectExpr("count(*)", "sum(length(value))").first())
        return row[0], row[1]

    def builtin() -> tuple[int, int]:
        row = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").load()
               .selectExpr("count(*)", "sum(length(value))").first())
        return row[0], row[1]

    ways = {"a bare confluent-kafka consumer": lambda: bare_consumer(bootstrap, topic, args.partitions),
            "b streamfill_kafka (spark.read)": timed(ours),
            "c Spark's format('kafka')": timed(builtin)}
    for fn in (ours, builtin):  # warm the JVM, the Python workers and the page cache
        fn()
    timings: dict[str, list[float]] = {k: [] for k in ways}
    results = {}
    for _ in range(args.repeat):
        for name, fn in ways.items():  # interleaved, so load on the machine hits each way alike
            count, size, seconds = fn()
            results[name] = count, size
            timings[name].append(seconds)
    spark.stop()
    assert len(set(results.values())) == 1, f"the three ways disagree: {results}"
    count = results["a bare confluent-kafka consumer"][0]
    rate = {name: count / statistics.median(ts) for name, ts in timings.items()}
    table = Table(title=f"reading {count:,} messages over {args.partitions} partitions (median of {args.repeat})")
    table.add_column("way")
    table.add_column("seconds", justify="right")
    table.add_column("messages/s", justify="right")
    for name, ts in timings.items():
        table.add_row(name, f"{statistics.median(ts):.2f}", f"{rate[name]:,.0f}")
    console.print(table)
    a, b, c = rate.values()
    console.print(f"b/a = {b / a:.2f}  (target >= 1.2)")
    console.print(f"b/c = {b / c:.2f}  (target >= 1.5)")


if __name__ == "__main__":
    main()

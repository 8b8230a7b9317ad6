"""The topic of demo events several benchmarks read: its flags, and producing it once for the runs that keep it."""

from __future__ import annotations

import argparse

from cleanup import Leftovers, add_keep_topic
from rich.console import Console

from streamfill.spark_jobs.demo.produce import ensure_topic, produce

console = Console()


def add_topic_args(ap: argparse.ArgumentParser, count: str = "--events",
                   topic: str = "bench_e2e_<events>_<partitions>") -> None:
    """`count` (how many records the topic holds) and --partitions: the topic the benchmark reads; and
    --keep-topic, naming `topic`."""
    ap.add_argument(count, type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    add_keep_topic(ap, topic)


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

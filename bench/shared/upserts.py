"""The upsert ways of bench/end_to_end.py: the jobs file keyed by event_id, the topic with tombstones, and the
check that the deletes took the rows they name."""

from __future__ import annotations

from pathlib import Path

import yaml
from cleanup import Leftovers
from rich.console import Console
from sqlalchemy import text

from streamfill.spark_jobs.demo.produce import ensure_topic, produce
from streamfill.spark_jobs.pipelines.jobs_file import jobs_file

console = Console()
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


def check_deletes(engine, written: dict[str, tuple[str, str]], deleted: int) -> None:
    """Way (g)'s table holds the upserts' rows (way (e), when it ran) less the `deleted` keys."""
    if "e" not in written:
        return
    with engine.connect() as conn:
        upserted = conn.scalar(text(f'SELECT count(*) FROM "{written["e"][0]}"'))
        kept = conn.scalar(text(f'SELECT count(*) FROM "{written["g"][0]}"'))
    assert kept == upserted - deleted, f"way g kept {kept:,} rows: the upserts' {upserted:,} less {deleted:,} deleted"

"""Small helpers for tests that need topics and records on the real broker."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 4, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[name].result(30)


def produce(bootstrap: str, topic: str, records: list[dict], **conf) -> None:
    """records: dicts of produce() keyword arguments (key, value, partition, headers, timestamp)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        producer.produce(topic, **r)
    assert producer.flush(60) == 0


def consume_all(bootstrap: str, topic: str, partitions: int, start: int = 0, end: dict | None = None,
                isolation: str = "read_committed") -> list:
    """Every record a bare consumer finds in [start, end) per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-probe", "enable.auto.commit": False,
                         "isolation.level": isolation})
    out = []
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        stop = (end or {}).get(p, high)
        if stop <= max(start, low):
            continue
        consumer.assign([TopicPartition(topic, p, max(start, low))])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msgs = consumer.consume(1000, timeout=0.5)
            out.extend(m for m in msgs if m.error() is None and m.offset() < stop)
            pos = consumer.position([TopicPartition(topic, p)])[0].offset
            if pos >= stop:
                break
    consumer.close()
    return out


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The log end of every partition of topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-probe"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: _log_end(consumer, TopicPartition(topic, p)) for p in parts}
    finally:
        consumer.close()


def _log_end(consumer: Consumer, tp: TopicPartition, timeout_s: float = 60) -> int:
    """A partition's log end, asked again while a just-created topic's leaders are still being elected."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)[1]
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def commit_as_connect(kafka: str | dict, group: str, topic: str, offsets: dict[int, int],
                      timeout_s: float = 180) -> None:
    """Commit `offsets` (partition -> next offset to read) in consumer group `group` from a consumer of that group,
    as a Kafka Connect sink's task does when it closes its partitions; asked until the group's coordinator answers.
    `kafka`: bootstrap servers, or a client configuration (a secured listener's)."""
    from confluent_kafka import KafkaException

    conf = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
                return
            except KafkaException:
                assert time.monotonic() < deadline, f"the broker's group coordinator did not answer for group {group}"
                time.sleep(0.5)
    finally:
        consumer.close()

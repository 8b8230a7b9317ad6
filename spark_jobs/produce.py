"""Demo traffic into Kafka: `streamfill produce` writes order events (spark_jobs.events), some of them bad."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka.errors import BrokerError
from spark_jobs.events import FIELDS, records


@dataclass
class Produced:
    valid: int = 0
    bad: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.valid + self.bad


def check_args(count: int, rate: float | None, partitions: int | None, bad_ratio: float,
               key_field: str | None) -> None:
    """Refuse bad arguments before touching the broker."""
    if count < 0:
        raise ValueError(f"--count {count} is negative; give the number of events to send, e.g. 100000")
    if rate is not None and rate <= 0:
        raise ValueError(f"--rate {rate} must be positive (events per second); leave it out for full speed")
    if partitions is not None and partitions < 1:
        raise ValueError(f"--partitions {partitions} must be at least 1")
    if not 0 <= bad_ratio <= 1:
        raise ValueError(f"--bad-ratio {bad_ratio} must be between 0 and 1, e.g. 0.02 for 2% bad records")
    if key_field is not None and key_field not in FIELDS:
        raise ValueError(f"--key-field {key_field!r} is not an event field; use one of {', '.join(FIELDS)} "
                         "or 'none' for records without a key")


def ensure_topic(bootstrap: str, topic: str, partitions: int | None, timeout_s: float = 30) -> int:
    """The topic's partition count, creating it when missing (one partition unless `partitions` says)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": "3"})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError(f"cannot reach Kafka at {bootstrap}: {exc}. Start it with `streamfill stack up` "
                          "or set STREAMFILL_KAFKA_BOOTSTRAP_SERVERS") from None
    if topic in md.topics and md.topics[topic].error is None:
        have = len(md.topics[topic].partitions)
        if partitions is not None and partitions != have:
            raise ValueError(f"topic {topic!r} exists with {have} partitions, not --partitions {partitions}; "
                             f"leave --partitions out or use another topic")
        return have
    want = partitions or 1
    fut = admin.create_topics([NewTopic(topic, num_partitions=want, replication_factor=1)])[topic]
    try:
        fut.result(timeout=timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise BrokerError(f"creating topic {topic!r} failed: {exc}") from None
    return want


def produce(bootstrap: str, topic: str, count: int, *, rate: float | None = None, bad_ratio: float = 0.0,
            key_field: str | None = "user_id", seed: int = 7, now: datetime | None = None,
            on_progress: Callable[[int], None] | None = None) -> Produced:
    """Send `count` events (the same ones for the same seed) and wait until the broker acknowledged all."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "enable.idempotence": True, "log_level": "3"})
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None and not errors:
            errors.append(f"partition {msg.partition()}: {err}")

    out = Produced()
    started = time.monotonic()
    for i, (key, value, bad) in enumerate(records(count, bad_ratio, seed, key_field, now), start=1):
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        out.bad += bad
        out.valid += not bad
        if errors:
            break
        if i % 5000 == 0:
            producer.poll(0)
            if on_progress:
                on_progress(5000)
        if rate is not None:
            ahead = i / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    left = producer.flush(120)
    if on_progress:
        on_progress(count % 5000)
    out.seconds = time.monotonic() - started
    if errors or left:
        raise BrokerError(f"sending to topic {topic!r} at {bootstrap} failed: "
                          f"{errors[0] if errors else f'{left} records not acknowledged after 120 s'}")
    return out

"""Demo traffic into Kafka: `streamfill produce` sends order events (`events`), some of them bad, through the
connector core's producer."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.writer import send_records
from streamfill.errors import OptionError
from streamfill.spark_jobs.demo.events import FIELDS, records


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
        raise OptionError("--count", count, "is negative", "give the number of events to send, e.g. 100000")
    if rate is not None and rate <= 0:
        raise OptionError("--rate", rate, "must be positive (events per second)", "leave it out for full speed")
    if partitions is not None and partitions < 1:
        raise OptionError("--partitions", partitions, "must be at least 1", "e.g. --partitions 4")
    if not 0 <= bad_ratio <= 1:
        raise OptionError("--bad-ratio", bad_ratio, "must be between 0 and 1", "e.g. 0.02 for 2% bad records")
    if key_field is not None and key_field not in FIELDS:
        raise OptionError("--key-field", key_field, "is not an event field",
                          f"use one of {', '.join(FIELDS)} or 'none' for records without a key")


def _client(kafka: str | Mapping[str, str]) -> dict[str, str]:
    return {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)


def ensure_topic(kafka: str | Mapping[str, str], topic: str, partitions: int | None, timeout_s: float = 30) -> int:
    """The topic's partition count, creating it when missing (one partition unless `partitions` says).
    `kafka`: bootstrap servers, or a cluster's librdkafka settings."""
    return Broker(_client(kafka), timeout_s).ensure_topic(topic, partitions)


def produce(kafka: str | Mapping[str, str], topic: str, count: int, *, rate: float | None = None,
            bad_ratio: float = 0.0, key_field: str | None = "user_id", seed: int = 7, now: datetime | None = None,
            on_progress: Callable[[int], None] | None = None) -> Produced:
    """Send `count` events (the same ones for the same seed) and wait until the broker acknowledged all."""
    out = Produced()

    def counted():
        for key, value, bad in records(count, bad_ratio, seed, key_field, now):
            out.bad += bad
            out.valid += not bad
            yield key, value

    started = time.monotonic()
    send_records(_client(kafka), topic, counted(), rate=rate, on_progress=on_progress)
    out.seconds = time.monotonic() - started
    return out

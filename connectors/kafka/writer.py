"""Records -> Kafka: Arrow batches with Spark's Kafka sink semantics (runs on executors; no Spark import), and
plain (key, value) records for producers outside Spark (`send_records`).

Columns as in Spark: `value` (required), `key`, `topic` (unless the `topic` option is set, which wins),
`partition` and `headers`. Sends are asynchronous; the first delivery error fails the task after a flush,
naming topic, partition and the broker's error. With a transactional id the task's records go out in one
Kafka transaction: committed when the task has sent everything, aborted (or fenced by the retry, which uses
the same id) when it fails, so read_committed consumers never see a failed attempt's records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from streamfill import failpoints
from streamfill.connectors.kafka.client import not_authorized, refusal
from streamfill.connectors.kafka.kafka_sink_declarations import PRODUCER_DEFAULTS
from streamfill.errors import BrokerError
from streamfill.kafka_client import describe


@dataclass
class _Delivery:
    kafka: Mapping[str, str]
    sent: int = 0
    first_error: str | None = None
    errors: int = 0

    def __call__(self, err: KafkaError | None, msg) -> None:
        if err is None:
            self.sent += 1
            return
        self.errors += 1
        if self.first_error is None:
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                self.first_error = not_authorized(self.kafka, msg.topic(), "write")
            else:
                self.first_error = (f"delivery to topic {msg.topic()} partition {msg.partition()} failed: "
                                    f"{err.str()} ({err.name()})")

    def on_error(self, err: KafkaError) -> None:
        """The producer's login or TLS refused: no record can be delivered, so the send stops at once."""
        found = refusal(self.kafka, err.str())
        if found and self.first_error is None:
            self.first_error = found


def _flush(producer: Producer, timeout_s: float, delivery: _Delivery) -> int:
    """Wait for every delivery report, or the first refusal; the number of records still unacknowledged."""
    deadline = time.monotonic() + timeout_s
    left = producer.flush(min(1.0, timeout_s))
    while left and delivery.first_error is None and time.monotonic() < deadline:
        left = producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    return left


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


def _bytes(v: object) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def write_batches(batches: Iterator[pa.RecordBatch], kafka: Mapping[str, str], topic: str | None,
                  transactional_id: str | None = None, flush_timeout_s: float | None = None) -> int:
    """Send every row; return how many were acknowledged. Raises BrokerError on the first failed delivery."""
    conf = {**PRODUCER_DEFAULTS, **kafka}
    if transactional_id:
        conf["transactional.id"] = transactional_id
        # librdkafka requires delivery.timeout.ms <= transaction.timeout.ms (60 s by default)
        conf.setdefault("transaction.timeout.ms", conf["delivery.timeout.ms"])
    timeout = flush_timeout_s or int(conf["delivery.timeout.ms"]) / 1000 + 10
    servers = describe(conf)
    delivery = _Delivery(conf)
    producer = Producer({**conf, "error_cb": delivery.on_error})
    if transactional_id:
        try:
            producer.init_transactions(timeout)  # fences an earlier attempt with this id and aborts its records
            producer.begin_transaction()
        except KafkaException as exc:
            producer.poll(0)
            raise BrokerError(f"starting a Kafka transaction ({transactional_id}) on {servers} failed: "
                              f"{delivery.first_error or exc}") from None
    try:
        for batch in batches:
            _send(producer, batch, topic, delivery)
            failpoints.hit("kafka_sink.batch_sent")
            if delivery.first_error:
                break
        left = _flush(producer, timeout, delivery)
        if delivery.first_error is None and left:
            delivery.first_error = (f"{left} records were not delivered within {timeout:.0f} s "
                                    f"(delivery.timeout.ms)")
        if delivery.first_error:
            raise BrokerError(f"{delivery.first_error}; {servers}; {delivery.errors} failed deliveries in this "
                              "task. Check that the broker is reachable and the topic exists")
        if transactional_id:
            producer.commit_transaction(timeout)
    except BaseException:
        if transactional_id:
            try:
                producer.abort_transaction(10)
            except KafkaException:
                pass  # a retry with the same transactional id fences and aborts it anyway
        raise
    return delivery.sent


def _send(producer: Producer, batch: pa.RecordBatch, topic: str | None, delivery: _Delivery) -> None:
    values = _column(batch, "value")
    keys = _column(batch, "key") or [None] * batch.num_rows
    topics = [topic] * batch.num_rows if topic else _column(batch, "topic")
    partitions = _column(batch, "partition") or [None] * batch.num_rows
    headers = _column(batch, "headers") or [None] * batch.num_rows
    for value, key, t, p, h in zip(values, keys, topics, partitions, headers, strict=False):
        if t is None:
            raise BrokerError("a row has a null topic and no topic option is set: set .option('topic', ...) or "
                              "fill the topic column")
        kwargs = {"value": _bytes(value), "key": _bytes(key), "on_delivery": delivery}
        if p is not None:
            kwargs["partition"] = p
        if h:
            kwargs["headers"] = [(x["key"], _bytes(x["value"])) for x in h]
        _produce(producer, t, kwargs)
        producer.poll(0)


def _produce(producer: Producer, topic: str, kwargs: dict) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


# throughput settings for bulk sends outside Spark; idempotence keeps retries from duplicating records
BULK_DEFAULTS = {"linger.ms": "20", "batch.size": "1000000", "compression.type": "lz4", "enable.idempotence": "true",
                 "log_level": "3"}


def send_records(kafka: Mapping[str, str], topic: str, records: Iterable[tuple[bytes | None, bytes]], *,
                 rate: float | None = None, on_progress: Callable[[int], None] | None = None,
                 flush_timeout_s: float = 120) -> int:
    """Send (key, value) records, at most `rate` per second, and wait until the broker acknowledged all.

    `on_progress(n)` every 5,000 records and once at the end; the first delivery error stops the send and raises."""
    delivery = _Delivery(kafka)
    producer = Producer({**BULK_DEFAULTS, **kafka, "error_cb": delivery.on_error})
    started = time.monotonic()
    sent = 0
    for sent, (key, value) in enumerate(records, start=1):
        _produce(producer, topic, {"value": value, "key": key, "on_delivery": delivery})
        if delivery.first_error:
            break
        if sent % 5000 == 0:
            producer.poll(0)
            if on_progress:
                on_progress(5000)
        if rate is not None:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    left = _flush(producer, flush_timeout_s, delivery)
    if on_progress:
        on_progress(sent % 5000)
    if delivery.first_error or left:
        raise BrokerError(f"sending to topic {topic!r} at {describe(kafka)} failed: "
                          f"{delivery.first_error or f'{left} records not acknowledged after {flush_timeout_s:.0f} s'}")
    return sent

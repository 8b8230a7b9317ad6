"""One offset range -> Arrow record batches with exactly Spark's Kafka schema. Runs on executors.

confluent-kafka `Consumer.assign` (no group coordination, no auto commit), large consume() batches, bounded
waits. Gaps from compaction or transaction markers end a range cleanly; a start that retention removed is
data loss.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KTopicPartition

from streamfill.bounded_cache import BoundedCache
from streamfill.connectors.kafka.client import not_authorized, refusal
from streamfill.connectors.kafka.data_loss import DataLoss, enforce
from streamfill.connectors.kafka.json_values import JsonColumns
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import BrokerError, BrokerRefused
from streamfill.kafka_client import DEFAULT_GROUP_ID, describe

log = logging.getLogger("streamfill.reader")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

BATCH_SIZE = 20_000
# a short fetch.queue.backoff.ms: librdkafka's 1 s pause once its queue is full would stall a partition's read;
# a short fetch.wait.max.ms: the broker holds a fetch left in flight at a range's end that long, and the next
# task's first fetch waits behind it. kafka.* options override these.
FETCH_DEFAULTS = {"max.partition.fetch.bytes": str(2 * 1024 * 1024), "fetch.max.bytes": str(64 * 1024 * 1024),
                  "fetch.queue.backoff.ms": "10", "fetch.wait.max.ms": "50"}
CONSUMERS_KEPT = 8  # configurations a worker keeps a consumer for; past that the least recently used is closed
_refusals: dict[frozenset, str] = {}  # a consumer's login or TLS refused by the broker: waiting cannot help


def _new_consumer(key: frozenset) -> Consumer:
    kafka = dict(key)

    def on_error(err: KafkaError) -> None:
        found = refusal(kafka, err.str())
        if found:
            _refusals.setdefault(key, found)

    return Consumer({
        "group.id": DEFAULT_GROUP_ID,
        "isolation.level": "read_committed",
        **FETCH_DEFAULTS,
        **kafka,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "error_cb": on_error,
    })


def _close_consumer(key: frozenset, consumer: Consumer) -> None:
    _refusals.pop(key, None)
    consumer.close()


_consumers: BoundedCache[frozenset, Consumer] = BoundedCache(CONSUMERS_KEPT, close=_close_consumer)


def consumer_for(kafka: Mapping[str, str]) -> Consumer:
    """One consumer per configuration in this Python worker, reused across ranges and tasks."""
    key = frozenset(kafka.items())
    return _consumers.get(key, lambda: _new_consumer(key))


def read_range(r: OffsetRange, kafka: Mapping[str, str], *, include_headers: bool = False,
               poll_timeout_ms: int = 120_000, fail_on_data_loss: bool = True,
               batch_size: int = BATCH_SIZE, json_columns: JsonColumns | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the records of r in order, as Arrow batches of at most batch_size rows; with `json_columns`, each
    batch also has the values typed where that is certain (connectors.kafka.json_values)."""
    if r.size <= 0:
        return
    consumer = consumer_for(kafka)
    ktp = KTopicPartition(r.topic, r.partition, r.start)
    consumer.assign([ktp])
    next_offset = r.start
    last_progress = time.monotonic()
    try:
        while next_offset < r.end:
            with _collector_paused():
                msgs = consumer.consume(num_messages=min(batch_size, r.end - next_offset), timeout=0.5)
                rows, offsets, next_offset = _in_range(consumer, msgs, r, next_offset, kafka, fail_on_data_loss)
                batch = _to_arrow(rows, offsets, include_headers, json_columns) if rows else None
                del msgs, rows  # freed here by reference count, before the collector runs again
            if batch is not None:
                last_progress = time.monotonic()
                yield batch
                continue
            position = consumer.position([KTopicPartition(r.topic, r.partition)])[0].offset
            if position >= r.end:  # only control records or compacted-away offsets were left
                break
            if position > next_offset:
                next_offset = position
                last_progress = time.monotonic()
                continue
            refused = _refusals.get(frozenset(kafka.items()))
            if refused:
                raise BrokerRefused(f"reading {r.topic}-{r.partition}: {refused}")
            waited = time.monotonic() - last_progress
            if waited * 1000 > poll_timeout_ms:
                try:
                    low, _ = _watermarks(consumer, r, kafka)
                except BrokerError as exc:
                    raise BrokerError(
                        f"no record of {r.topic}-{r.partition} at offset {next_offset} (range [{r.start}, {r.end})) "
                        f"after waiting {waited:.1f} s: the broker does not answer ({exc}). Check that "
                        "kafka.bootstrap.servers is right and the broker is running") from None
                if low > next_offset:
                    next_offset = _after_loss(consumer, r, next_offset, kafka, fail_on_data_loss)
                    last_progress = time.monotonic()
                    continue
                raise BrokerError(
                    f"no record of {r.topic}-{r.partition} at offset {next_offset} (range [{r.start}, {r.end})) "
                    f"after waiting {waited:.1f} s on bootstrap servers {kafka.get('bootstrap.servers')}. "
                    "Check that the broker is reachable; raise kafkaConsumer.pollTimeoutMs to wait longer")
    finally:
        consumer.unassign()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one consume() batch becomes Arrow: the batch's many Message
    objects are freed by reference count, and a running collector would scan them (and the Spark worker's whole
    heap) again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _in_range(consumer: Consumer, msgs: list, r: OffsetRange, next_offset: int, kafka: Mapping[str, str],
              fail_on_data_loss: bool) -> tuple[list, np.ndarray, int]:
    """The messages of one consume() in [next_offset, r.end), their offsets (int64), and the offset to read next."""
    if msgs and not any(map(Message.error, msgs)):
        offsets = np.fromiter(map(Message.offset, msgs), np.int64, len(msgs))
        if (offsets[1:] > offsets[:-1]).all():
            # the common case, without a Python step per record: offsets ascend, so two bisects find the range
            first, stop = (int(i) for i in np.searchsorted(offsets, (next_offset, r.end)))
            if first >= stop:
                return [], offsets[:0], next_offset
            if offsets[first] > next_offset:
                _check_gap(consumer, r, next_offset, int(offsets[first]), kafka, fail_on_data_loss)
            return msgs[first:stop], offsets[first:stop], int(offsets[stop - 1]) + 1
    rows, offsets = [], []
    for m in msgs:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._AUTO_OFFSET_RESET:
                resume = _after_loss(consumer, r, next_offset, kafka, fail_on_data_loss)
                return rows, np.array(offsets, np.int64), resume
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise BrokerRefused(not_authorized(kafka, r.topic, "read"))
            raise BrokerError(f"reading {r.topic}-{r.partition} from {describe(kafka)}: {err.str()}")
        off = m.offset()
        if off >= r.end:
            break
        if off < next_offset:
            continue
        if off > next_offset and not rows:
            _check_gap(consumer, r, next_offset, off, kafka, fail_on_data_loss)
        rows.append(m)
        offsets.append(off)
        next_offset = off + 1
    return rows, np.array(offsets, np.int64), next_offset


def _watermarks(consumer: Consumer, r: OffsetRange, kafka: Mapping[str, str]) -> tuple[int, int]:
    try:
        return consumer.get_watermark_offsets(KTopicPartition(r.topic, r.partition), timeout=10, cached=False)
    except Exception as exc:  # KafkaException or a timeout: either way the broker did not answer
        raise BrokerError(f"asking bootstrap servers {kafka.get('bootstrap.servers')} for the offsets of "
                          f"{r.topic}-{r.partition} failed: {exc}") from None


def _check_gap(consumer: Consumer, r: OffsetRange, expected: int, got: int, kafka: Mapping[str, str],
               fail_on_data_loss: bool) -> None:
    """A jump forward is compaction or a transaction marker, unless the log start moved past `expected`."""
    low, _ = _watermarks(consumer, r, kafka)
    if low > expected:
        enforce([DataLoss(r.topic, r.partition, "aged_out_in_range", expected, min(low, got))], fail_on_data_loss)


def _after_loss(consumer: Consumer, r: OffsetRange, expected: int, kafka: Mapping[str, str],
                fail_on_data_loss: bool) -> int:
    """The offset to go on from after records in the range were deleted (or raise)."""
    low, _ = _watermarks(consumer, r, kafka)
    enforce([DataLoss(r.topic, r.partition, "aged_out_in_range", expected, min(max(low, expected), r.end))],
            fail_on_data_loss)
    resume = min(max(low, expected), r.end)
    if resume < r.end:
        consumer.assign([KTopicPartition(r.topic, r.partition, resume)])
    return resume


def _to_arrow(msgs: list, offsets: np.ndarray, include_headers: bool,
              json_columns: JsonColumns | None = None) -> pa.RecordBatch:
    """Columns by C-level maps over the messages; timestamps converted in Arrow, not per record in Python."""
    n = len(msgs)
    stamps = np.fromiter(chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n).reshape(n, 2)
    types = pa.array(stamps[:, 0].astype(np.int32))
    micros = pc.multiply_checked(pa.array(stamps[:, 1]), 1000)  # a wild producer time fails, as in Spark
    if pc.min(types).as_py() == TIMESTAMP_NOT_AVAILABLE:
        micros = pc.if_else(pc.equal(types, TIMESTAMP_NOT_AVAILABLE), pa.scalar(None, pa.int64()), micros)
    first = msgs[0]
    values = list(map(Message.value, msgs))
    value_array = pa.array(values, pa.binary())
    columns = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        value_array,
        pa.repeat(pa.scalar(first.topic(), pa.string()), n),
        pa.repeat(pa.scalar(first.partition(), pa.int32()), n),
        pa.array(offsets, pa.int64()),
        micros.cast(pa.timestamp("us", tz="UTC")),
        pc.subtract(types, pa.scalar(1, pa.int32())),  # Spark's timestampType: 0 create time, 1 log append
    ]
    schema = ARROW_SCHEMA
    if include_headers:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in msgs],
                                HEADERS_TYPE))
        schema = ARROW_SCHEMA_WITH_HEADERS
    if json_columns is not None:
        columns += json_columns.parse(values, value_array)
        schema = pa.schema([*schema, *json_columns.arrow_fields])
    return pa.RecordBatch.from_arrays(columns, schema=schema)

"""The reader's conversion of consumed messages, without a broker: confluent-kafka's Message is constructible."""

from __future__ import annotations

import gc
from datetime import datetime, timezone

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    Message,
)
from confluent_kafka import TopicPartition as KTopicPartition
from hypothesis import given
from hypothesis import strategies as st

from streamfill.connectors.kafka import reader
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import BrokerError, DataLossError

pytestmark = pytest.mark.unit


def msg(offset: int, value: bytes = b"v", *, key: bytes | None = None, stamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_123),
        headers=None) -> Message:
    return Message(topic="t", partition=2, offset=offset, key=key, value=value, timestamp=stamp, headers=headers)


def test_a_batch_becomes_sparks_kafka_columns():
    msgs = [msg(5, b"a", key=b"k"), msg(6, b"b", stamp=(TIMESTAMP_LOG_APPEND_TIME, 1_700_000_000_456)),
            msg(7, b"", stamp=(TIMESTAMP_NOT_AVAILABLE, -1))]
    rows = reader._to_arrow(msgs, [5, 6, 7], include_headers=False).to_pylist()
    assert [(r["key"], r["value"], r["topic"], r["partition"], r["offset"]) for r in rows] == [
        (b"k", b"a", "t", 2, 5), (None, b"b", "t", 2, 6), (None, b"", "t", 2, 7)]
    assert [r["timestamp"] for r in rows] == [datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc),
                                            datetime(2023, 11, 14, 22, 13, 20, 456000, tzinfo=timezone.utc), None]
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # Spark's: create time 0, log append 1


def test_headers_keep_their_order_and_bytes():
    rows = reader._to_arrow([msg(0, headers=[("a", b"1"), ("a", b"\x00")]), msg(1)], [0, 1],
                            include_headers=True).to_pylist()
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": b"\x00"}]
    assert rows[1]["headers"] == []


def test_only_the_offsets_of_the_range_are_kept():
    r = OffsetRange("t", 2, 10, 13)
    kept, offsets, next_offset = reader._in_range(None, [msg(o) for o in (8, 9, 10, 11, 12, 13, 14)], r, 10, {}, True)
    assert list(offsets) == [10, 11, 12] and [m.offset() for m in kept] == list(offsets) and next_offset == 13
    kept, offsets, next_offset = reader._in_range(None, [msg(8), msg(9)], r, 10, {}, True)
    assert (kept, list(offsets), next_offset) == ([], [], 10)


def test_a_jump_inside_the_range_is_a_transaction_marker_or_compaction_not_a_loss():
    # the range's first record is where expected; later gaps need no broker round trip
    kept, offsets, next_offset = reader._in_range(None, [msg(10), msg(12), msg(15)], OffsetRange("t", 2, 10, 20),
                                                  10, {}, True)
    assert list(offsets) == [10, 12, 15] and next_offset == 16


def test_an_error_from_the_broker_names_topic_partition_and_servers():
    bad = Message(error=KafkaError(KafkaError._TRANSPORT), topic="t", partition=2, offset=-1001)
    with pytest.raises(BrokerError, match=r"t-2 from bootstrap servers b:9092"):
        reader._in_range(None, [msg(10), bad], OffsetRange("t", 2, 10, 20), 10, {"bootstrap.servers": "b:9092"},
                         True)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_only_while_a_batch_converts(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with reader._collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), reader._collector_paused():
            raise RuntimeError("a failed read")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


class StubConsumer:
    """What the reader asks of a consumer: consume() answers with the given batches in turn; the log starts at
    `low`."""

    def __init__(self, batches=(), low: int = 0) -> None:
        self.batches, self.low, self.assigned = list(batches), low, []

    def assign(self, tps) -> None:
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in tps])

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list:
        return self.batches.pop(0) if self.batches else []

    def position(self, tps) -> list:
        return [KTopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def get_watermark_offsets(self, tp, timeout: float, cached: bool) -> tuple[int, int]:
        return self.low, 1_000_000


@given(st.lists(st.integers(0, 60), unique=True).map(sorted), st.integers(0, 60), st.integers(0, 60))
def test_the_bisected_slice_is_what_a_loop_over_the_records_keeps(offsets, start, length):
    # the log starts at 0, so a gap before the first record kept is compaction or a marker, not a loss
    r = OffsetRange("t", 2, start, start + length)
    kept, got, next_offset = reader._in_range(StubConsumer(), [msg(o) for o in offsets], r, start, {}, True)
    expected = [o for o in offsets if r.start <= o < r.end]
    assert list(got) == expected and [m.offset() for m in kept] == expected
    assert next_offset == (expected[-1] + 1 if expected else start)


def test_records_out_of_order_are_kept_once_in_order():
    kept, offsets, next_offset = reader._in_range(StubConsumer(), [msg(o) for o in (10, 11, 11, 9, 12)],
                                                  OffsetRange("t", 2, 10, 20), 10, {}, True)
    assert list(offsets) == [10, 11, 12] and next_offset == 13


def test_records_deleted_before_the_first_one_read_are_data_loss():
    r = OffsetRange("t", 2, 10, 20)
    with pytest.raises(DataLossError, match=r"t-2.*\[10, 14\)"):
        reader._in_range(StubConsumer(low=14), [msg(14), msg(15)], r, 10, {}, True)
    # failOnDataLoss=false: the read goes on from the first record there
    _, offsets, next_offset = reader._in_range(StubConsumer(low=14), [msg(14), msg(15)], r, 10, {}, False)
    assert (list(offsets), next_offset) == ([14, 15], 16)


def test_an_offset_reset_mid_batch_keeps_the_records_before_it_and_goes_on_from_the_log_start():
    reset = Message(error=KafkaError(KafkaError._AUTO_OFFSET_RESET), topic="t", partition=2, offset=-1001)
    consumer = StubConsumer(low=14)
    kept, offsets, next_offset = reader._in_range(consumer, [msg(10), reset], OffsetRange("t", 2, 10, 20), 10, {},
                                                  False)
    assert list(offsets) == [10] and next_offset == 14 and consumer.assigned == [[("t", 2, 14)]]


def test_a_range_is_read_in_batches_with_the_collector_running_between_them(monkeypatch):
    consumer = StubConsumer([[msg(o) for o in range(10, 15)], [msg(o) for o in range(15, 22)]])
    monkeypatch.setattr(reader, "consumer_for", lambda kafka: consumer)
    assert gc.isenabled()
    seen = []
    for batch in reader.read_range(OffsetRange("t", 2, 10, 20), {}):
        assert gc.isenabled()  # never paused while Spark holds the batch
        seen += batch.column("offset").to_pylist()
    assert seen == list(range(10, 20)) and consumer.assigned == [[("t", 2, 10)]]

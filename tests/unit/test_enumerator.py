"""Stream rounds against an in-memory broker: new partitions, AvailableNow's end, minOffsetsPerTrigger."""

from __future__ import annotations

import pytest

from streamfill.connectors.kafka.enumerator import StreamEnumerator
from streamfill.connectors.kafka.options import parse
from streamfill.errors import DataLossError
from streamfill.partitions import TopicPartition

pytestmark = pytest.mark.unit
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class MemoryBroker:
    """The questions the enumerator asks a broker, answered from dicts; its user may read every topic."""

    def __init__(self, logs: dict[TopicPartition, tuple[int, int]]) -> None:
        self.logs = logs

    def topics(self) -> dict[str, int]:
        return {"t": len(self.logs)}

    def watermarks(self, partitions):
        return {tp: self.logs[tp] for tp in partitions}

    def offsets_for_times(self, times):
        return {tp: None for tp in times}

    def require(self, topics, operation):
        pass

    def readable(self, topics):
        return self.topics()


def enumerator(broker, **options) -> StreamEnumerator:
    opts = parse({"kafka.bootstrap.servers": "memory", "subscribe": "t", **options}, streaming=True)
    return StreamEnumerator(opts, broker)


def test_a_new_partition_is_read_from_its_first_offset():
    broker = MemoryBroker({T0: (0, 10)})
    e = enumerator(broker, startingOffsets="earliest")
    start = e.initial()
    assert start == {T0: 0}
    broker.logs = {T0: (0, 10), T1: (0, 4)}
    end = e.next_end(start, None, None)
    assert end == {T0: 10, T1: 4}
    assert [(r.partition, r.start, r.end) for r in e.plan(start, end).ranges] == [(0, 0, 10), (1, 0, 4)]


def test_a_new_partition_not_starting_at_zero_is_data_loss():
    broker = MemoryBroker({T0: (0, 10)})
    e = enumerator(broker)
    broker.logs = {T0: (0, 10), T1: (3, 9)}
    with pytest.raises(DataLossError, match=r"t-1.*\[0, 3\)"):
        e.plan({T0: 10}, {T0: 10, T1: 9})


def test_available_now_never_passes_the_offsets_of_its_start():
    broker = MemoryBroker({T0: (0, 100), T1: (0, 50)})
    e = enumerator(broker, startingOffsets="earliest")
    start = e.initial()
    e.prepare_available_now()
    broker.logs = {T0: (0, 500), T1: (0, 80), T2: (0, 9)}  # producers go on, a partition appears
    ends = []
    while True:
        end = e.next_end(start, 60, None)
        if end == start:
            break
        assert sum(end[tp] - start.get(tp, 0) for tp in end) <= 60
        ends.append(end)
        start = end
    assert start == {T0: 100, T1: 50, T2: 0}


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay_passed():
    broker = MemoryBroker({T0: (0, 5)})
    e = enumerator(broker, minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    assert e.next_end({T0: 0}, None, 10) == {T0: 0}, "5 waiting, fewer than 10: skip the trigger"
    broker.logs = {T0: (0, 12)}
    assert e.next_end({T0: 0}, None, 10) == {T0: 12}
    late = enumerator(MemoryBroker({T0: (0, 5)}), minOffsetsPerTrigger="10", maxTriggerDelay="0ms")
    assert late.next_end({T0: 0}, None, 10) == {T0: 5}, "the delay passed: take what there is"


def test_initial_offsets_are_resolved_once():
    broker = MemoryBroker({T0: (0, 10)})
    e = enumerator(broker)
    assert e.initial() == {T0: 10}
    broker.logs = {T0: (0, 99)}
    assert e.initial() == {T0: 10}, "Spark asks twice; latest must not move in between"


def test_a_position_past_the_log_end_is_data_loss_even_with_nothing_to_read():
    """The topic was deleted and recreated: the log now ends below where the stream stands (Spark: "offset was
    changed from 2300 to 1300"). A batch must happen to report it, even when the new log is empty."""
    broker = MemoryBroker({T0: (0, 0)})
    e = enumerator(broker)
    end = e.next_end({T0: 2300}, None, None)
    assert end == {T0: 0}, "an empty new log still gives a batch, so the loss is seen"
    with pytest.raises(DataLossError, match=r"t-0: the log now ends at offset 0, below the position 2300"):
        e.plan({T0: 2300}, end)


def test_with_fail_on_data_loss_false_the_new_log_is_read_from_its_start():
    broker = MemoryBroker({T0: (0, 1300)})
    e = enumerator(broker, failOnDataLoss="false")
    end = e.next_end({T0: 2300}, 1000, None)
    assert end == {T0: 1000}
    plan = e.plan({T0: 2300}, end)
    assert [(r.start, r.end) for r in plan.ranges] == [(0, 1000)]
    assert [(x.kind, x.lost_from, x.lost_to) for x in plan.losses] == [("offset_went_back", 1300, 2300)]
    assert plan.bounds == {T0: (0, 1000)}


def test_sparks_end_below_its_start_is_the_signal_even_when_the_log_grew_past_the_position_since():
    """The round that chose the end saw the new log end at 20; by the plan the log holds 600. The plan must
    still read [0, 20), as Spark's checkpoint says, and record the loss."""
    broker = MemoryBroker({T0: (0, 20)})
    e = enumerator(broker, failOnDataLoss="false")
    end = e.next_end({T0: 500}, None, None)
    assert end == {T0: 20}
    broker.logs = {T0: (0, 600)}
    plan = e.plan({T0: 500}, end)
    assert plan.bounds == {T0: (0, 20)}
    assert [(x.kind, x.lost_to) for x in plan.losses] == [("offset_went_back", 500)]


class GroupBroker(MemoryBroker):
    """MemoryBroker with one consumer group: its committed offsets and its live members, as a Connect sink leaves
    them; counts how often the group is read."""

    def __init__(self, logs, committed: dict[TopicPartition, int], members: str = "") -> None:
        super().__init__(logs)
        self.committed, self.members, self.reads = committed, members, 0
        self.kafka = {"bootstrap.servers": "memory"}

    def group_members(self, group, operation):
        return self.members

    def committed_offsets(self, group, partitions):
        self.reads += 1
        return {tp: off for tp, off in self.committed.items() if tp in partitions}


def test_a_group_start_takes_each_committed_offset_and_earliest_where_the_group_has_none(caplog):
    broker = GroupBroker({T0: (0, 100), T1: (5, 80), T2: (7, 9)}, {T0: 60, T1: 80})
    e = enumerator(broker, startingGroup="connect-jdbc-sink")
    with caplog.at_level("INFO", logger="streamfill.source"):
        assert e.initial() == {T0: 60, T1: 80, T2: 7}, "t-2 has no committed offset: its log start, as Connect's"
    assert "no committed offset for t-2: starting there at the earliest offset" in caplog.text
    broker.committed = {T0: 0, T1: 0}
    assert e.initial() == {T0: 60, T1: 80, T2: 7}, "read once"
    resumed = enumerator(broker, startingGroup="connect-jdbc-sink")
    assert resumed.initial({T0: 70, T1: 80}) == {T0: 70, T1: 80, T2: 7}, "a job with a position never reads it"
    assert broker.reads == 1


def test_a_group_start_is_refused_while_the_connector_runs_or_when_the_group_committed_nothing():
    from streamfill.errors import BrokerRefused, OptionError

    running = GroupBroker({T0: (0, 100)}, {T0: 60}, members="connector-consumer-jdbc-sink-0 on /10.0.0.7")
    with pytest.raises(BrokerRefused) as refused:
        enumerator(running, startingGroup="connect-jdbc-sink").initial()
    said = str(refused.value)
    assert "consumer group 'connect-jdbc-sink'" in said and "connector-consumer-jdbc-sink-0" in said
    assert "/connectors/jdbc-sink/stop" in said and running.reads == 0
    with pytest.raises(OptionError, match=r"option startingGroup='connect-jdbc-snik': has no committed offset for "
                                          r"any partition of t .*connect-<connector name>"):
        enumerator(GroupBroker({T0: (0, 100)}, {}), startingGroup="connect-jdbc-snik").initial()
    with pytest.raises(OptionError, match="ends beyond the log: offset 120 of t-0"):
        enumerator(GroupBroker({T0: (0, 100)}, {T0: 120}), startingGroup="g").initial()


def test_a_group_start_is_a_streams_alone():
    from streamfill.errors import OptionError

    with pytest.raises(OptionError, match="is a stream's start, not a bounded read's"):
        parse({"kafka.bootstrap.servers": "memory", "subscribe": "t", "startingGroup": "g"}, streaming=False)
    with pytest.raises(OptionError, match="is given with startingOffsets: a stream has one start"):
        enumerator(MemoryBroker({T0: (0, 1)}), startingGroup="g", startingOffsets="earliest")

"""The planner's properties: ranges disjoint, ordered, covering; limits respected; splitting proportional."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfill.connectors.kafka.planner import (
    OffsetRange,
    backlog,
    offsets_behind,
    pack_ranges,
    ranges_between,
    rate_limit,
    split_ranges,
)
from streamfill.errors import OptionError
from streamfill.partitions import TopicPartition

pytestmark = pytest.mark.unit

TP = [TopicPartition("t", i) for i in range(8)]

range_lists = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 50_000)), min_size=1, max_size=8,
).map(lambda xs: [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(xs)])


def covers_exactly(original: list[OffsetRange], pieces: list[OffsetRange]) -> None:
    for r in original:
        mine = [p for p in pieces if p.tp == r.tp]
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        for a, b in zip(mine, mine[1:]):
            assert a.end == b.start, "ordered, disjoint and without holes"
        assert all(p.size > 0 for p in mine)


@given(range_lists, st.integers(1, 64))
def test_min_partitions_split_is_ordered_disjoint_covering(ranges, min_partitions):
    pieces = split_ranges(ranges, min_partitions=min_partitions)
    covers_exactly(ranges, pieces)
    nonempty = [r for r in ranges if r.size]
    assert len(pieces) >= min(len(nonempty), 1)


@given(range_lists, st.integers(500, 5_000))
def test_max_records_per_partition_caps_every_piece(ranges, cap):
    pieces = split_ranges(ranges, max_records_per_partition=cap)
    covers_exactly(ranges, pieces)
    assert all(p.size <= cap for p in pieces)


def test_min_partitions_splits_in_proportion_to_size():
    ranges = [OffsetRange("t", 0, 0, 9000), OffsetRange("t", 1, 0, 1000)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len([p for p in pieces if p.partition == 0]) == 9
    assert len([p for p in pieces if p.partition == 1]) == 1


def test_enough_ranges_are_not_split():
    ranges = [OffsetRange("t", i, 0, 100) for i in range(4)]
    assert split_ranges(ranges, min_partitions=3) == ranges


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100_000)), min_size=1, max_size=8),
       st.integers(1, 200_000))
def test_rate_limit_never_exceeds_the_limit_and_takes_all_it_may(parts, limit):
    start = {TP[i]: s for i, (s, _) in enumerate(parts)}
    latest = {TP[i]: s + n for i, (s, n) in enumerate(parts)}
    end = rate_limit(start, latest, limit)
    taken = backlog(start, end)
    assert taken == min(limit, backlog(start, latest))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)


def test_rate_limit_shares_in_proportion_to_backlog():
    start = {TP[0]: 0, TP[1]: 0}
    end = rate_limit(start, {TP[0]: 3000, TP[1]: 1000}, 400)
    assert end == {TP[0]: 300, TP[1]: 100}


def test_an_end_before_its_start_names_the_option_and_partition():
    with pytest.raises(OptionError) as err:
        ranges_between({TP[0]: 10}, {TP[0]: 5}, option="endingOffsets")
    assert "endingOffsets" in str(err.value) and "t-0" in str(err.value)


def test_offsets_behind_latest():
    assert offsets_behind({TP[0]: 5, TP[1]: 10}, {TP[0]: 15, TP[1]: 10}) == {
        "minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 10, "avgOffsetsBehindLatest": 5.0}


def test_pack_ranges_groups_small_ranges_into_at_most_max_tasks():
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([10, 40, 30, 20])]
    assert pack_ranges(ranges) == [(r,) for r in ranges]
    assert pack_ranges(ranges, 4) == [(r,) for r in ranges]
    packed = pack_ranges(ranges, 2)
    assert sorted(sum(r.size for r in task) for task in packed) == [50, 50]
    assert sorted((r for task in packed for r in task), key=lambda r: r.partition) == ranges
    assert pack_ranges(ranges, 1) == [tuple(ranges)]


def test_pack_ranges_never_grows_a_task_past_max_records():
    ranges = [OffsetRange("t", p, 0, 30) for p in range(4)]
    packed = pack_ranges(ranges, 1, max_records=60)
    assert [sum(r.size for r in task) for task in packed] == [60, 60]

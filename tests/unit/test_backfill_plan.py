"""Backfill specs, validation before Spark, chunking; the demo events and the stream's trigger parsing."""

from __future__ import annotations

import json

import pytest

from streamfill.connectors.kafka.offsets import Earliest, GlobalTimestamp, Latest, SpecificOffsets
from streamfill.errors import OptionError
from streamfill.partitions import TopicPartition
from streamfill.spark_jobs.backfill_plan import Window, next_chunk, parse_spec, progress, remaining, resolve_window
from streamfill.spark_jobs.demo import events
from streamfill.spark_jobs.demo.produce import check_args
from streamfill.trigger_grammar import parse_trigger

pytestmark = pytest.mark.unit

T = "orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)
WM = {TP0: (10, 100), TP1: (0, 50)}
NOW = 1_800_000_000_000


def offsets_for_times(query):
    """A fake log where offset = (ts - 1_000) // 10 in every partition, and no record after ts 2_000."""
    return {tp: (None if ts > 2_000 else max(0, (ts - 1_000) // 10)) for tp, ts in query.items()}


def window(from_: str, to: str, partitions: int | None = 2, now: int = NOW) -> Window:
    return resolve_window(T, partitions, WM, offsets_for_times, parse_spec(from_, "--from", T),
                          parse_spec(to, "--to", T), now,
                          raw_from=from_, raw_to=to, known_topics=["orders", "payments"])


def test_specs_parse_to_offset_specs():
    assert parse_spec("earliest", "--from", T) == Earliest()
    assert parse_spec(" LATEST ", "--to", T) == Latest()
    assert parse_spec('{"0": 5, "1": -1}', "--from", T) == SpecificOffsets(((TP0, 5), (TP1, -1)))
    assert parse_spec('{"orders": {"1": 7}}', "--from", T) == SpecificOffsets(((TP1, 7),))
    assert parse_spec("2026-11-22T10:00:00Z", "--from", T) == GlobalTimestamp(1795341600000)
    assert parse_spec("2026-11-22T11:00:00+01:00", "--to", T) == GlobalTimestamp(1795341600000)
    assert parse_spec("2026-11-22T10:00:00", "--to", T) == GlobalTimestamp(1795341600000)  # UTC when naive


@pytest.mark.parametrize("raw, expected", [
    ("yesterday", "--from 'yesterday' is not a spec; use earliest, latest"),
    ('{"0": 5', "is not valid JSON"),
    ('{"a": 5}', "must map partition numbers to offsets"),
    ('{"0": -3}', "must map partition numbers to offsets"),
    ("[1, 2]", "is not a spec; use earliest"),
    ('{"0": true}', "--from '{\"0\": true}' offset true of orders-0 is not a JSON integer"),
    ('{"orders": {"1": 5.0}}', "offset 5.0 of orders-1 is not a JSON integer"),
])
def test_bad_specs_name_the_value_and_the_fix(raw, expected):
    with pytest.raises(OptionError) as info:
        parse_spec(raw, "--from", T)
    assert expected in str(info.value)


@pytest.mark.parametrize("raw", ['{"0": false}', '{"0": 1e2}', '{"orders": {"0": true}}'])
def test_to_refuses_booleans_and_floats_too(raw):
    with pytest.raises(OptionError, match="^--to .* is not a JSON integer"):
        parse_spec(raw, "--to", T)


def test_offsets_and_times_resolve_to_ranges():
    assert window("earliest", "latest").bounds == {TP0: (10, 100), TP1: (0, 50)}
    assert window('{"0": 20}', '{"1": 40}').bounds == {TP0: (20, 100), TP1: (0, 40)}
    # times: first offset at or after each instant; an instant past the newest record is the log end
    w = window("1970-01-01T00:00:01.200Z", "1970-01-01T00:00:01.450Z")
    assert w.bounds == {TP0: (20, 45), TP1: (20, 45)}
    assert window("1970-01-01T00:00:01.200Z", "1970-01-01T00:00:05Z").bounds[TP1] == (20, 50)
    assert w.total == 50
    assert Window.from_json(json.loads(json.dumps(w.to_json()))) == w


@pytest.mark.parametrize("from_, to, partitions, message", [
    ("earliest", "latest", None, "--topic 'orders' does not exist; existing topics: orders, payments"),
    ('{"5": 1}', "latest", 2, "names partition 5, but topic 'orders' has partitions 0..1"),
    ('{"0": 50}', '{"0": 20}', 2, "start offset 50 > end offset 20"),
    ("1970-01-01T00:00:01.400Z", "1970-01-01T00:00:01.200Z", 2, "is after --to"),
    ("2030-01-01T00:00:00Z", "latest", 2, "is in the future (now is 2027-01-15T08:00:00+00:00)"),
    ('{"0": 3}', "latest", 2, "offset 3 of orders-0 is below the log start 10; offsets 3..9 were deleted"),
    ("earliest", '{"1": 70}', 2, "offset 70 of orders-1 is beyond the log end 50"),
])
def test_validation_names_the_value_and_the_fix(from_, to, partitions, message):
    with pytest.raises(OptionError) as info:
        window(from_, to, partitions)
    assert message in str(info.value)


def test_chunks_cover_the_window_once_within_the_chunk_size_and_resume_from_progress():
    w = Window({TP0: (10, 100), TP1: (0, 50)})
    done = progress(w, {})
    seen: list[tuple[TopicPartition, int]] = []
    while chunk := next_chunk(w, done, 17):
        assert 0 < sum(e - s for s, e in chunk.values()) <= 17
        for tp, (s, e) in chunk.items():
            assert s == done[tp]
            seen += [(tp, o) for o in range(s, e)]
            done[tp] = e
    assert sorted(seen) == sorted([(TP0, o) for o in range(10, 100)] + [(TP1, o) for o in range(50)])
    # a snapshot from an earlier pass outside the window is clamped into it
    assert progress(w, {TP0: 5, TP1: 70}) == {TP0: 10, TP1: 50}
    assert remaining(w, progress(w, {TP0: 40})) == 60 + 50


def test_with_a_width_a_chunk_reads_the_partitions_with_most_left_and_covers_the_window_once():
    parts = [TopicPartition(T, p) for p in range(4)]
    w = Window({tp: (0, 1000 + 10 * tp.partition) for tp in parts})
    done = progress(w, {})
    first = next_chunk(w, done, 100, width=2)
    assert sorted(tp.partition for tp in first) == [2, 3], "the two partitions with most left"
    assert sum(e - s for s, e in first.values()) == 100
    seen: list[tuple[TopicPartition, int]] = []
    chunks = 0
    while chunk := next_chunk(w, done, 100, width=2):
        chunks += 1
        assert 0 < sum(e - s for s, e in chunk.values()) <= 100
        for tp, (s, e) in chunk.items():
            assert s == done[tp]
            seen += [(tp, o) for o in range(s, e)]
            done[tp] = e
    assert sorted(seen) == sorted((tp, o) for tp, (s, e) in w.bounds.items() for o in range(s, e))
    assert chunks == -(-w.total // 100), "every chunk but the last is full"
    near_end = {TopicPartition(T, 0): 995, TopicPartition(T, 1): 1005, TopicPartition(T, 2): 1020,
                TopicPartition(T, 3): 990}
    assert sorted(tp.partition for tp in next_chunk(w, near_end, 100, width=2)) == [0, 1, 3], \
        "a third partition joins when the two with most left hold less than a chunk"


def test_chunks_in_flight_never_share_a_partition_and_together_cover_the_window_once():
    """Two chunks written at once (the backfill's pipeline): the next one avoids the busy partitions, and when only
    busy ones have work left there is no next chunk until one of them commits."""
    parts = [TopicPartition(T, p) for p in range(3)]
    w = Window({tp: (0, 300) for tp in parts})
    planned = progress(w, {})
    flying: list[dict] = []
    seen: list[tuple[TopicPartition, int]] = []
    while True:
        busy = {tp for c in flying for tp in c}
        chunk = next_chunk(w, planned, 100, width=1, busy=busy)
        if chunk and len(flying) < 2:
            assert not busy & set(chunk), "a chunk in flight shares a partition with the next"
            assert all(s == planned[tp] for tp, (s, _) in chunk.items())
            planned.update({tp: e for tp, (_, e) in chunk.items()})
            flying.append(chunk)
            continue
        if not flying:
            break
        for tp, (s, e) in flying.pop(0).items():  # the oldest commits
            seen += [(tp, o) for o in range(s, e)]
    assert sorted(seen) == sorted((tp, o) for tp, (s, e) in w.bounds.items() for o in range(s, e))
    only_busy = {TopicPartition(T, 0): 0, TopicPartition(T, 1): 300, TopicPartition(T, 2): 300}
    assert next_chunk(w, only_busy, 100, width=1, busy={TopicPartition(T, 0)}) == {}


def test_demo_events_are_reproducible_and_bad_ones_are_realistic():
    first = list(events.records(500, 0.2, seed=3))
    again = list(events.records(500, 0.2, seed=3))
    ids = [json.loads(v)["event_id"] for _, v, b in first if not b]
    assert ids == [json.loads(v)["event_id"] for _, v, b in again if not b] and len(set(ids)) == len(ids)
    bad = [v for _, v, b in first if b]
    good = [json.loads(v) for _, v, b in first if not b]
    assert 60 < len(bad) < 140
    assert all(set(e) == set(events.FIELDS) and e["event_type"] in events.EVENT_TYPES for e in good)
    assert all(k == str(json.loads(v)["user_id"]).encode() for k, v, b in first if not b)
    broken = 0
    for v in bad:
        try:
            e = json.loads(v)
        except json.JSONDecodeError:
            broken += 1
            continue
        assert (set(e) != set(events.FIELDS) or not isinstance(e["user_id"], int)
                or not isinstance(e["amount"], float) or e["event_time"] == "yesterday"
                or not 0 <= e["amount"] <= events.MAX_AMOUNT or e["event_type"] not in events.EVENT_TYPES
                or e["currency"] not in events.CURRENCIES)
    assert broken > 0


@pytest.mark.parametrize("args, message", [
    ((-1, None, None, 0.0, None), "--count -1 is negative"),
    ((10, 0, None, 0.0, None), "--rate 0 must be positive"),
    ((10, None, 0, 0.0, None), "--partitions 0 must be at least 1"),
    ((10, None, None, 1.5, None), "--bad-ratio 1.5 must be between 0 and 1"),
    ((10, None, None, 0.1, "colour"), "--key-field 'colour' is not an event field"),
])
def test_produce_arguments_are_checked_before_the_broker(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        check_args(*args)


def test_triggers():
    assert parse_trigger("available-now") == {"availableNow": True}
    assert parse_trigger("5s") == {"processingTime": "5 seconds"}
    assert parse_trigger("500ms") == {"processingTime": "500 milliseconds"}
    assert parse_trigger("2m") == {"processingTime": "2 minutes"}
    for bad in ("0s", "soon", "5h", ""):
        with pytest.raises(OptionError, match="is not a trigger; use available-now"):
            parse_trigger(bad)

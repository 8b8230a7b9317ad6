"""Pure parts of the sinks and the offsets tools: option rules, COPY encoding, error texts."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pyarrow as pa
import pytest
import typer
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from app.commands.offsets import parse_since
from connectors.kafka.options import parse as parse_source
from connectors.postgres import copy, partitions, target
from connectors.spark import kafka_sink
from streamfill.errors import CheckpointMismatch, OptionError
from streamfill.names import parse_table

pytestmark = pytest.mark.unit


def test_table_names_and_schemas():
    assert parse_table("orders") == (None, "orders")
    assert parse_table("sales.Orders") == ("sales", "Orders")
    for bad in (None, " ", "a.b.c", "a.", "x" * 64):
        with pytest.raises(OptionError, match="table"):
            parse_table(bad)


def test_key_defaults_to_kafka_coordinates_and_names_what_is_missing():
    assert target.parse_key(None, ["topic", "partition", "offset", "v"]) == ("topic", "partition", "offset")
    assert target.parse_key(" id , day", ["id", "day"]) == ("id", "day")
    with pytest.raises(OptionError, match="set keyColumns"):
        target.parse_key(None, ["id"])
    with pytest.raises(OptionError, match="nope are not in the DataFrame"):
        target.parse_key("id,nope", ["id"])


def test_modes():
    assert target.parse_mode(None) == "append-new"
    assert target.parse_mode("REPLACE") == "replace"
    with pytest.raises(OptionError, match="append-new .* or replace"):
        target.parse_mode("merge")


def test_stage_names_fit_postgres_and_differ_per_job():
    a = target.stage_name("public", "x" * 63, "job-a")
    b = target.stage_name("public", "x" * 63, "job-b")
    assert len(a) <= 63 and a != b


@pytest.mark.parametrize("existing, written", [
    ("bigint", "integer"), ("integer", "smallint"), ("double precision", "integer"), ("double precision", "real"),
    ("numeric", "bigint"), ("numeric(12,2)", "integer"), ("numeric(21,2)", "bigint"), ("numeric", "numeric(12, 2)"),
    ("numeric(14,4)", "numeric(12, 2)"), ("character varying", "text"), ("timestamp with time zone", "timestamptz"),
    ("timestamp(6) with time zone", "timestamptz"), ("timestamp without time zone", "timestamp"),
    ("jsonb", "jsonb"), ("bytea", "bytea"), ("boolean", "boolean"), ("date", "date"),
])
def test_a_column_holds_every_value_of_a_narrower_type(existing, written):
    assert target.holds(existing, written)


@pytest.mark.parametrize("existing, written", [
    ("integer", "bigint"),  # 3000000000 fails at COPY
    ("real", "integer"), ("double precision", "bigint"),  # rounded
    ("numeric(12,2)", "bigint"), ("numeric(12,2)", "numeric(14, 2)"), ("numeric(12,1)", "numeric(12, 2)"),
    ("character varying(5)", "text"), ("character(5)", "text"), ("uuid", "text"), ("text", "bigint"),
    ("jsonb", "text"), ("json", "jsonb"), ("text", "jsonb"),
    ("timestamp(3) with time zone", "timestamptz"), ("timestamp without time zone", "timestamptz"),
    ("timestamp with time zone", "timestamp"), ("timestamp with time zone", "date"), ("integer", "boolean"),
    ("text[]", "jsonb"),
])
def test_a_column_that_would_refuse_or_round_some_values_does_not_hold_them(existing, written):
    assert not target.holds(existing, written)


def _tuples(data: bytes) -> list[list[bytes | None]]:
    """COPY binary format: header, then per row a field count and length-prefixed fields, then -1."""
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00")
    pos, rows = 19, []
    while True:
        (n,) = struct.unpack_from("!h", data, pos)
        pos += 2
        if n == -1:
            assert pos == len(data), "nothing after the trailer"
            return rows
        row = []
        for _ in range(n):
            (size,) = struct.unpack_from("!i", data, pos)
            pos += 4
            row.append(None if size == -1 else data[pos:pos + size])
            pos += max(size, 0)
        rows.append(row)


def test_copy_encoding_is_binary_copy_with_nested_values_as_jsonb_and_no_empty_chunk():
    batch = pa.record_batch({
        "b": pa.array([b"\x00,\n\"", None], pa.binary()),
        "s": pa.array(['a,"b"\nc', ""]),
        "n": pa.array([1, None], pa.int64()),
        "h": pa.array([[{"key": "k", "value": b"\x01"}], None],
                      pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })
    empty = batch.slice(0, 0)
    chunks = list(copy.encode([empty, batch, empty, batch.slice(1)], ["b", "s", "n", "h"], "w1"))
    assert all(chunks), "copy_expert takes an empty read for the end of the input"
    rows = _tuples(b"".join(chunks))
    assert rows[0] == [b"\x00,\n\"", b'a,"b"\nc', struct.pack("!q", 1), b'\x01[{"key": "k", "value": "01"}]', b"w1"]
    assert rows[1] == rows[2] == [None, b"", None, None, b"w1"], "NULL and the empty string stay apart"
    assert _tuples(b"".join(copy.encode([batch], ["n"], None))) == [[struct.pack("!q", 1)], [None]]
    assert list(copy.encode([empty], ["n"], "w1")) == [], "no rows, no COPY"


def test_checkpoint_mismatch_names_both_positions_and_the_ways_out():
    text = str(CheckpointMismatch("orders", {("t", 0): 5, ("t", 1): 9}, {("t", 0): 7, ("t", 1): 9}))
    assert "t-0: checkpoint 5, offsets_db 7" in text and "t-1" not in text
    assert "delete the checkpoint directory" in text and "new job name" in text


def test_source_job_options():
    base = {"kafka.bootstrap.servers": "b:1", "subscribe": "t"}
    assert parse_source({**base, "job": "orders.v2"}, streaming=True).job == "orders.v2"
    with pytest.raises(OptionError, match="option job='a b'"):
        parse_source({**base, "job": "a b"}, streaming=True)
    with pytest.raises(OptionError, match="commitToGroup.*needs the job option"):
        parse_source({**base, "commitToGroup": "g"}, streaming=True)


def test_kafka_sink_options():
    schema = StructType([StructField("topic", StringType()), StructField("value", StringType())])
    opts = kafka_sink.parse({"kafka.bootstrap.servers": "b:1", "transactional": "true"}, schema)
    assert opts.topic is None and opts.transactional_prefix.startswith("streamfill-")
    bad = StructType([StructField("value", IntegerType())])
    with pytest.raises(OptionError, match="option value='int'.*Cast it to string or binary"):
        kafka_sink.parse({"kafka.bootstrap.servers": "b:1", "topic": "t"}, bad)


def test_postgres_sink_ending_offsets_name_the_batch_or_fail_before_connecting():
    """endingOffsets (a backfill chunk's ends) is checked before the sink reaches PostgreSQL."""
    from connectors.spark.postgres_sink import _plan

    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType())])
    base = {"table": "t", "job": "j", "jobGeneration": "1", "url": "postgresql://nobody@127.0.0.1:1/none"}
    for raw, problem in (("{bad", "is not a JSON object"), ('["t"]', "is not a JSON object"),
                         ('{"t": {"0": -1}}', "offsets of 0 or more"), ("{}", "at least one partition")):
        with pytest.raises(OptionError, match=problem) as info:
            _plan({**base, "endingOffsets": raw}, schema, False, streaming=False)
        assert f"endingOffsets={raw!r}" in str(info.value) and '{"topic": {"0": 123}}' in str(info.value)
    with pytest.raises(OptionError, match="is for a bounded write with a job"):
        _plan({**base, "endingOffsets": '{"t": {"0": 5}}'}, schema, False, streaming=True)
    with pytest.raises(OptionError, match="is for a bounded write with a job"):
        _plan({"table": "t", "endingOffsets": '{"t": {"0": 5}}'}, schema, False, streaming=False)


def test_since_takes_ages_and_iso_times():
    now = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-11-22T10:00:00", now) == datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
    assert parse_since(None, now) is None
    with pytest.raises(typer.BadParameter, match="neither an ISO-8601 time nor an age"):
        parse_since("yesterday", now)


def test_partition_bounds_are_read_back_with_quotes_in_topic_names():
    assert partitions._bounds("FOR VALUES FROM ('it''s', 3, '10') TO ('it''s', 3, '20')") == (
        ["it's", "3", "10"], ["it's", "3", "20"])


def test_small_adjacent_partitions_of_one_kafka_partition_are_merged_in_runs():
    def part(p: int, low: int, rows: int):
        return (f"p{p}_{low}", "t", p, low, low + 10, rows)

    parts = [part(0, i * 10, 5) for i in range(3)] + [part(0, 30, 10_000_000)] + [part(0, 40 + i * 10, 5)
                                                                                  for i in range(9)]
    parts += [part(1, i * 10, 5) for i in range(7)]
    runs = partitions._runs(parts, below_rows=1000, when=8)
    assert [[p[0] for p in r] for r in runs] == [[f"p0_{40 + i * 10}" for i in range(9)]], \
        "a large partition breaks a run; fewer than 8 small ones wait"


def test_chunk_sized_partitions_wait_until_they_add_up_to_a_full_partition_and_are_copied_once():
    def part(p: int, low: int, rows: int):
        return (f"p{p}_{low}", "t", p, low, low + rows, rows)

    fifty = [part(0, i * 50_000, 50_000) for i in range(39)]
    assert partitions._runs(fifty, below_rows=2_000_000, when=8) == [], \
        "39 chunks of 50,000 add up to 1,950,000 rows: they wait rather than make a partition merged again later"
    forty_one = fifty + [part(0, 39 * 50_000, 50_000), part(0, 40 * 50_000, 50_000)]
    assert [p[0] for p in partitions._runs(forty_one, below_rows=2_000_000, when=8)[0]] == \
        [f"p0_{i * 50_000}" for i in range(40)], "the first 40 make 2,000,000 rows; the 41st waits for the next"
    large = [part(1, i * 500_000, 500_000) for i in range(4)]
    assert [p[0] for p in partitions._runs(large, below_rows=2_000_000, when=8)[0]] == \
        [f"p1_{i * 500_000}" for i in range(4)], "four default chunks make one full partition"
    broken = [part(2, 0, 1_500_000), part(2, 1_500_000, 2_000_000), part(2, 3_500_000, 400_000),
              part(2, 3_900_000, 20_000), part(2, 3_920_000, 1_700_000)]
    assert partitions._runs(broken, below_rows=2_000_000, when=8) == [], \
        "a full partition or a smaller one in between breaks the run: no run adds up to 2,000,000"
    smallest = [part(3, i * 31_250, 31_250) for i in range(70)]
    assert len(partitions._runs(smallest, below_rows=2_000_000, when=8)[0]) == partitions.MERGE_MOST, \
        "the smallest partitions that wait for a full one make a merge of 64 at most"


def test_a_merged_partition_is_not_merged_again_with_each_new_small_one():
    def part(low: int, rows: int):
        return (f"p_{low}", "t", 0, low, low + 10, rows)

    merged_once = [part(0, 100_000)] + [part(10 + i * 10, 12_500) for i in range(7)]
    assert partitions._runs(merged_once, below_rows=2_000_000, when=8) == [], \
        "one partition of 8 merged ones and 7 new ones: the new ones wait for an eighth, nothing is copied twice"
    eight_new = merged_once + [part(80, 12_500)]
    assert [p[0] for p in partitions._runs(eight_new, below_rows=2_000_000, when=8)[0]] == \
        [f"p_{10 + i * 10}" for i in range(8)]
    mixed = [part(i * 10, 9_000 if i % 2 else 40_000) for i in range(64)]
    assert len(partitions._runs(mixed, below_rows=2_000_000, when=8)[0]) == 64, \
        "sizes that alternate between tiers are merged anyway once there are 64"
    grown = [part(0, 1_500_000)] + [part(10 + i * 10, 3_000 if i % 2 else 9_000) for i in range(63)]
    assert [p[0] for p in partitions._runs(grown, below_rows=2_000_000, when=8)[0]] == [p[0] for p in grown[1:]], \
        "a partition larger than the rest of the run is left out, not copied again for a few rows"
    middle = [part(0, 3_000), part(10, 9_000), part(20, 1_500_000)] + [part(30 + i * 10, 3_000 if i % 2 else 9_000)
                                                                      for i in range(61)]
    assert [p[0] for p in partitions._runs(middle, below_rows=2_000_000, when=8)[0]] == [p[0] for p in middle[3:]], \
        "a dominant partition inside the run splits it, wherever it sits"
    isolated = [p for i in range(64) for p in (part(i * 20, 2_000_000), part(i * 20 + 10, 30_000))]
    assert partitions._runs(isolated, below_rows=2_000_000, when=8) == [], \
        "a small partition between two full ones has nothing to be merged with"
    shorter = isolated + [part(2_000, 1_900_000), part(2_010, 10_000), part(2_020, 1_950_000), part(2_030, 2_000_000),
                          part(2_040, 9_000), part(2_050, 3_000), part(2_060, 9_000)]
    assert [p[0] for p in partitions._runs(shorter, below_rows=2_000_000, when=8)[0]] == ["p_2040", "p_2050",
                                                                                          "p_2060"], \
        "the longest run split at its dominant partitions leaves one: a shorter run that merges two is taken"


def test_a_commit_during_a_merge_has_the_merge_thread_look_again_when_it_ends(monkeypatch):
    """Only one merge thread per target: a commit that lands while it runs must not leave its partitions
    unmerged until some later commit (the last chunk of a backfill has no later commit)."""
    import threading

    from connectors.spark import postgres_sink

    first_pass, release = threading.Event(), threading.Event()
    passes: list[int] = []
    threads: set[int] = set()

    def merge_once(plan) -> int:
        passes.append(len(passes))
        threads.add(threading.get_ident())
        if len(passes) == 1:
            first_pass.set()
            assert release.wait(30)
        return 0  # nothing merged: without another commit the thread would stop after this pass

    monkeypatch.setattr(postgres_sink, "_merge_once", merge_once)
    plan = SimpleNamespace(url="postgresql://h/db", target=SimpleNamespace(schema="public", table="t"))
    postgres_sink._merge_later(plan)
    assert first_pass.wait(30)
    thread = next(t for t in threading.enumerate() if t.name == "streamfill-merge-t")
    postgres_sink._merge_later(plan)  # a second commit during the first pass: no second thread
    assert [t.name for t in threading.enumerate()].count("streamfill-merge-t") == 1
    release.set()
    thread.join(30)
    assert not thread.is_alive()
    assert passes == [0, 1], "one pass for the first commit, one more for the commit during it"
    assert len(threads) == 1, "the second commit's look is the running thread's, not a thread of its own"
    postgres_sink._merge_later(plan)  # a commit after the thread ended starts a new one
    next((t for t in threading.enumerate() if t.name == "streamfill-merge-t"), thread).join(30)
    assert passes == [0, 1, 2]

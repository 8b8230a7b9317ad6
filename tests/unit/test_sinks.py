"""Pure parts of the sinks and the offsets tools: option rules, COPY encoding, error texts."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
import typer
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from streamfill.cli.commands.offsets import parse_since
from streamfill.connectors.kafka.options import parse as parse_source
from streamfill.connectors.postgres import column_types, copy, sink_options, stage
from streamfill.connectors.spark import kafka_sink
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
    assert sink_options.parse_key(None, ["topic", "partition", "offset", "v"]) == ("topic", "partition", "offset")
    assert sink_options.parse_key(" id , day", ["id", "day"]) == ("id", "day")
    with pytest.raises(OptionError, match="set keyColumns"):
        sink_options.parse_key(None, ["id"])
    with pytest.raises(OptionError, match="nope are not in the DataFrame"):
        sink_options.parse_key("id,nope", ["id"])


def test_modes():
    assert sink_options.parse_mode(None) == "append-new"
    assert sink_options.parse_mode("REPLACE") == "replace"
    with pytest.raises(OptionError, match="append-new .* or replace"):
        sink_options.parse_mode("merge")


def test_a_version_column_orders_versions_between_partitions_before_kafkas_timestamp():
    pipeline = ["id", "seq", "topic", "partition", "offset", "kafka_timestamp"]
    opts = sink_options.parse({"table": "t", "mode": "replace", "keyColumns": "id", "versionColumn": "seq"}, pipeline,
                              streaming=False)
    assert opts.version == ("seq", "kafka_timestamp", "topic", "partition", "offset")
    with pytest.raises(OptionError, match=r"versionColumn='nope': is not a column of the DataFrame that can order"):
        sink_options.parse({"table": "t", "mode": "replace", "keyColumns": "id", "versionColumn": "nope"}, pipeline,
                           streaming=False)
    with pytest.raises(OptionError, match=r"versionColumn='seq': needs the Kafka timestamp"):
        sink_options.parse({"table": "t", "mode": "replace", "keyColumns": "id", "versionColumn": "seq"},
                           ["id", "seq", "offset"], streaming=False)
    with pytest.raises(OptionError, match=r"versionColumn='seq': orders the versions of a key, which only mode "
                                          r"replace keeps \(mode: append-new\)"):
        sink_options.parse({"table": "t", "keyColumns": "id", "versionColumn": "seq"}, pipeline, streaming=False)


def test_which_version_of_a_key_wins_is_kafkas_timestamp_then_topic_partition_and_offset():
    pipeline = ["event_id", "topic", "partition", "offset", "kafka_timestamp", "_error", "_raw"]
    spark_kafka = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert sink_options.version_order(pipeline) == ("kafka_timestamp", "topic", "partition", "offset")
    assert sink_options.version_order(spark_kafka) == ("timestamp", "topic", "partition", "offset")
    assert sink_options.version_order(["id", "offset"]) == ()
    opts = sink_options.parse({"table": "t", "mode": "replace", "keyColumns": "event_id", "job": "j",
                               "deadLetters": "true"}, pipeline, streaming=True)
    assert opts.version == ("kafka_timestamp", "topic", "partition", "offset") and opts.staged_only == ("_error", "_raw")
    assert sink_options.parse({"table": "t", "keyColumns": "event_id"}, pipeline, streaming=False).version == (), \
        "append-new keeps the row that is there: no order needed"
    with pytest.raises(OptionError, match=r"option mode='replace': needs Kafka's timestamp, topic, partition and "
                                          r"offset.*Keep the columns kafka_timestamp"):
        sink_options.parse({"table": "t", "mode": "replace", "keyColumns": "id", "job": "j"}, ["id", "offset"],
                           streaming=True)


def test_stage_names_fit_postgres_and_differ_per_job():
    a = stage.stage_name("public", "x" * 63, "job-a")
    b = stage.stage_name("public", "x" * 63, "job-b")
    assert len(a) <= 63 and a != b


@pytest.mark.parametrize("existing, written", [
    ("bigint", "integer"), ("integer", "smallint"), ("double precision", "integer"), ("double precision", "real"),
    ("numeric", "bigint"), ("numeric(12,2)", "integer"), ("numeric(21,2)", "bigint"), ("numeric", "numeric(12, 2)"),
    ("numeric(14,4)", "numeric(12, 2)"), ("character varying", "text"), ("timestamp with time zone", "timestamptz"),
    ("timestamp(6) with time zone", "timestamptz"), ("timestamp without time zone", "timestamp"),
    ("jsonb", "jsonb"), ("bytea", "bytea"), ("boolean", "boolean"), ("date", "date"),
])
def test_a_column_holds_every_value_of_a_narrower_type(existing, written):
    assert column_types.holds_every_value(existing, written)


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
    assert not column_types.holds_every_value(existing, written)


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
    from streamfill.connectors.spark.postgres_plan import plan_write

    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType())])
    base = {"table": "t", "job": "j", "jobGeneration": "1", "url": "postgresql://nobody@127.0.0.1:1/none"}
    for raw, problem in (("{bad", "is not a JSON object"), ('["t"]', "is not a JSON object"),
                         ('{"t": {"0": -1}}', "offsets of 0 or more"), ("{}", "at least one partition")):
        with pytest.raises(OptionError, match=problem) as info:
            plan_write({**base, "endingOffsets": raw}, schema, False, streaming=False)
        assert f"endingOffsets={raw!r}" in str(info.value) and '{"topic": {"0": 123}}' in str(info.value)
    with pytest.raises(OptionError, match="is for a bounded write with a job"):
        plan_write({**base, "endingOffsets": '{"t": {"0": 5}}'}, schema, False, streaming=True)
    with pytest.raises(OptionError, match="is for a bounded write with a job"):
        plan_write({"table": "t", "endingOffsets": '{"t": {"0": 5}}'}, schema, False, streaming=False)


def test_since_takes_ages_and_iso_times():
    now = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-11-22T10:00:00", now) == datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
    assert parse_since(None, now) is None
    with pytest.raises(typer.BadParameter, match="neither an ISO-8601 time nor an age"):
        parse_since("yesterday", now)

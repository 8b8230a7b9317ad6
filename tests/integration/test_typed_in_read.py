"""Values typed in the read (typed_in_read.reader_options, connectors.kafka.json_values) give exactly the rows and
dead-letter reasons of Spark's own parse: thousands of records, valid and broken in the ways JSON producers break
them and in the ways the two parsers could read differently, through the real broker and source, both ways."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime

import pytest

from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.spark_jobs.pipelines.compile import check, parse
from streamfill.spark_jobs.pipelines.typed_in_read import reader_options
from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration

SPEC = PipelineSpec(name="typed", topic="typed", table="typed", key=["id"], columns={
    "id": {"type": "string", "required": True, "max_length": 12, "pattern": "^[a-z0-9-]+$"},
    "n": {"type": "int", "min": 1, "max": 1000},
    "big": {"type": "bigint"},
    "x": {"type": "double", "min": -1.5, "max": 1e12},
    "amount": {"type": "decimal(12,2)", "min": 0, "max": 100000},
    "wide": {"type": "decimal(30,6)"},
    "ok": {"type": "boolean"},
    "day": {"type": "date", "min": "2000-01-01"},
    "at": {"type": "timestamp", "min": "2020-01-01T00:00:00Z", "max": "2030-01-01T00:00:00+01:00"},
    "kind": {"type": "string", "in": ["a", "b", "ü"]},
    "level": {"type": "bigint", "in": [1, 2, 3]},
    "note": {"type": "string", "field": "Note"},
})
# each field's JSON text: a valid canonical value first, then bounds and what only one of the parsers might accept
FIELDS = {
    "id": ['"abc-1"', '"e-7"', '"ABC"', '"a\\u0000b"', '"' + "x" * 13 + '"', '"xxxxxxxxxxxx"', '"\\u00e9"',
           '"a\\nb"', '"a\\/b"', "7", "null", "true", '"\\ud83d\\ude00"', '"\\ud800"', '""', '"a b"', '"é"'],
    "n": ["5", "1", "0", "1000", "1001", "-3", "5.0", "5.5", '"5"', '" 5"', "2147483648", "-2147483649", "1e2",
          "true", "null", "-0", "05", "2147483647"],
    "big": ["9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "0",
            "12345678901234567890123", "1.0", '"42"', "-17"],
    "x": ["2.5", "-1.5", "-1.6", "1e12", "1.0000000000001e12", "1e400", "-0.0", "0.1", "3", '"2.5"', "1E-300",
          "123456789012345678901234567890", "5e-324", "0.30000000000000004"],
    "amount": ["12.34", "1.005", "2.675", "0.125", "1.004", "100000", "100000.004", "100000.005", "-0.001",
               "-0.005", "0", "1e2", "1E-2", '"12.34"', "99999.995", "0.1", "1.0049999999999999999",
               "12345678901234567890.123", "1.23456789e4", "7", "-0.0", "0.015", "1000.0050000000001"],
    "wide": ["42", "0.0000005", "0.0000015", "123456789012345678901234.123456", "1e24", "1e25", "0.1",
             "1234567890123456789012345", "-0.0000004"],
    "ok": ["true", "false", '"true"', '"TRUE"', "1", "null"],
    "day": ['"2026-11-25"', '"1999-12-31"', '"2000-01-01"', '"2026-02-30"', '"2024-02-29"', '"2026-11-25T10:00:00Z"',
            '"2026-1-5"', '" 2026-11-25"', '"20261125"', '"0001-01-01"'],
    "at": ['"2026-11-25T08:20:55.991+00:00"', '"2026-11-25T08:20:55Z"', '"2026-11-25 08:20:55.123456+05:30"',
           '"2019-12-31T23:59:59Z"', '"2020-01-01T00:00:00Z"', '"2029-12-31T23:00:00Z"',
           '"2029-12-31T23:00:00.000001Z"', '"2026-11-25T08:20:55.1234567Z"', '"2026-11-25t08:20:55z"',
           '"2026-11-25T08:20:55"', '"2026-11-25T08:20:55+05"', '"2026-11-25T08:20:55+18:00"',
           '"2026-11-25T08:20:55-18:00"', '"2026-11-25T08:20:55+19:00"', '"2026-02-30T00:00:00Z"',
           '"2026-11-25T24:00:00Z"', '"2026-11-25"', '"2026-11-25T08:20:55.1Z"', '"yesterday"', "1700000000"],
    "kind": ['"a"', '"b"', '"ü"', '"\\u00fc"', '"A"', '"c"', "1", "null"],
    "level": ["1", "3", "4", "1.0", '"1"', "null", "2"],
    "Note": ['"hi"', "null", '{"a": 1}', "[1, 2]", '"\\t"'],
}
# what Jackson refuses even where no column reads: a float of 1,000 digits in all, a key of 50,000 characters
JACKSON_LIMITS = [
    b'{"id": "abc-1", "other": ' + b"1" * 600 + b"." + b"2" * 600 + b"}",
    b'{"id": "abc-1", "x": 2' + b"0" * 600 + b"." + b"0" * 500 + b"e-600}",
    b'{"id": "abc-1", "amount": 1' + b"0" * 500 + b"." + b"0" * 500 + b"e-500}",
    b'{"id": "abc-1", "other": ' + b"1" * 499 + b"." + b"2" * 499 + b"}",
    b'{"id": "abc-1", "' + b"k" * 50_001 + b'": 1}', b'{"id": "abc-1", "other": {"' + b"k" * 60_000 + b'": null}}',
    b'{"id": "abc-1", "wide": 1e94}', b'{"id": "abc-1", "wide": 1' + b"0" * 94 + b"}", b'{"id": "abc-1", "x": -0}',
    b'{"\\u0069d": "abc-1", "\\u006e": 7}',
]
EXTRA = ['"other": "\\u0000"', '"other": ' + "[" * 600 + "]" * 600, '"other": ' + "[" * 1001 + "]" * 1001,
         '"other": 1' + "0" * 1000, '"_corrupt": "x"', '"_corrupt": null', '"ID": "abc"', '"AMOUNT": 5',
         '"other": {"deep": [1, 2, {"x": null}]}']


def _record(rng: random.Random) -> bytes:
    pairs = []
    for name, choices in FIELDS.items():
        roll = rng.random()
        if roll < 0.05:
            continue  # missing
        pairs.append(f'"{name}": {choices[0] if roll < 0.88 else rng.choice(choices)}')
        if roll > 0.97:
            pairs.append(f'"{name}": {rng.choice(choices)}')  # the same key twice
    if rng.random() < 0.15:
        pairs.insert(rng.randrange(len(pairs) + 1), rng.choice(EXTRA))
    if rng.random() < 0.2:  # amounts as producers write them: two to five decimals
        pairs.append(f'"amount": {round(rng.uniform(0, 1000), rng.randint(2, 5))}')
    text = "{" + ", ".join(pairs) + "}"
    roll = rng.random()
    if roll < 0.02:
        return text.encode()[:rng.randrange(len(text))]  # cut short
    if roll < 0.03:
        return (text + " trailing").encode()
    if roll < 0.04:
        return text.replace('"', "'").encode()  # single quotes: Spark accepts them
    if roll < 0.05:
        return ("[" + text + "]").encode()
    if roll < 0.06:
        return text.encode()[:-1] + b', "bad": "\xff\xfe"}'  # invalid UTF-8 in a field no column reads
    return text.encode()


def _signed(row: dict) -> dict:
    """A row where -0.0 and 0.0 differ, as they do in PostgreSQL."""
    return {k: (v, math.copysign(1, v)) if isinstance(v, float) else v for k, v in row.items()}


def test_values_typed_in_the_read_give_spark_parse_rows_and_dead_letters_exactly(spark, bootstrap, topic_name):
    rng = random.Random(20261125)
    values = ([_record(rng) for _ in range(4000)] + JACKSON_LIMITS
              + [b"", None, b"{}", b'{"id": "abc-1"}', b"null", b'"text"'])
    create_topic(bootstrap, topic_name, partitions=1)
    produce(bootstrap, topic_name, [{"value": v} for v in values], **{"message.max.bytes": 2_000_000})

    def kafka(options):
        return (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic_name).options(**options).load())

    options = reader_options(SPEC)
    assert options, "every column of SPEC is one the read can type"
    typed_read = kafka(options).cache()
    spark_rows = {r["offset"]: r.asDict() for r in parse(kafka({}), SPEC).collect()}
    typed_rows = {r["offset"]: r.asDict() for r in parse(typed_read, SPEC).collect()}
    assert len(spark_rows) == len(values) == len(typed_rows)
    differ = [(o, spark_rows[o], typed_rows[o]) for o in sorted(spark_rows)
              if _signed(spark_rows[o]) != _signed(typed_rows[o])]
    assert not differ, (f"{len(differ)} rows differ; first: value {values[differ[0][0]]!r}\n"
                        f"Spark: {differ[0][1]}\ntyped in the read: {differ[0][2]}")

    # the typed values of rejected records (what quality checks compare) agree too
    assert sorted(map(tuple, check(kafka({}), SPEC).collect())) == sorted(map(tuple, check(typed_read, SPEC).collect()))

    # the read typed a good share itself, valid rows and pattern-rejected ones among them
    parsed = typed_read.where("_parsed").count()
    valid = sum(r["_error"] is None for r in spark_rows.values())
    assert 0.2 * len(values) < parsed and valid > 300
    reasons = {r["_error"].split(":")[0] for r in spark_rows.values() if r["_error"]}
    assert {"invalid JSON", "value is not valid UTF-8", "id does not match pattern ^[a-z0-9-]+$",
            "amount out of range for decimal(12,2)", "at is not a timestamp"} <= reasons, reasons
    typed_read.unpersist()


def test_bounds_written_with_a_fraction_on_an_int_column_fire_in_both_parsers(spark):
    """YAML reads `min: 1.0` as a float; Spark's cast of "1.0" to int is null, and a null bound never fired."""
    spec = PipelineSpec(name="bounds", topic="bounds", table="bounds",
                        columns={"n": {"type": "int", "min": 1.0, "max": 100.0}})
    rows = [(None, json.dumps({"n": n}).encode(), "bounds", 0, i, datetime(2026, 1, 1), 0)
            for i, n in enumerate((0, 1, 100, 101))]
    kafka = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long, "
                                        "timestamp timestamp, timestampType int")
    assert [r["_error"] for r in check(kafka, spec).orderBy("offset").collect()] == [
        "n below min 1.0: 0", None, None, "n above max 100.0: 101"]
    option = json.loads(reader_options(spec)["jsonColumns"])["columns"][0]
    assert (option["min"], option["max"]) == (1, 100)

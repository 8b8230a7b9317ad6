"""Pipeline entries: the type grammar, the jobs file's validation (each bad entry named by file, job, field,
value and fix) and the expectations the rules become."""

from __future__ import annotations

import json
import textwrap

import pytest

from streamfill.spark_jobs.pipelines import JobsFileError, load, read
from streamfill.spark_jobs.pipelines.expectations import class_name, extra, from_rules
from streamfill.spark_jobs.pipelines.types import TypeSyntaxError, parse_type

pytestmark = pytest.mark.unit

ENTRY = """\
jobs:
  payments:
    topic: payments
    columns:
      payment_id: {type: string, required: true, max_length: 64}
      amount:     {type: "decimal(12,2)", required: true, min: 0, max: 1000000}
      currency:   {type: string, in: [EUR, USD, GBP]}
      paid_at:    {type: timestamp, required: true}
      card_last4: {type: string, pattern: "^[0-9]{4}$"}
      refunded:   {type: boolean}
      tags:       {type: "array<string>"}
      customer:   {type: "struct<id:bigint,country:string>"}
      cust_id:    {type: bigint, field: customer.id}
    derived:
      amount_eur: "CASE WHEN currency = 'EUR' THEN amount END"
    table: payments
    key: [payment_id]
    mode: replace
    quality:
      - expect_column_values_to_be_unique: {column: payment_id}
"""


def write(tmp_path, text: str, name: str = "jobs.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("raw, spark, postgres", [
    ("string", "string", "text"), ("int", "int", "integer"), ("bigint", "bigint", "bigint"),
    ("double", "double", "double precision"), ("decimal(12,2)", "decimal(12,2)", "numeric(12,2)"),
    ("boolean", "boolean", "boolean"), ("date", "date", "date"), ("timestamp", "timestamp", "timestamptz"),
    ("json", "string", "jsonb"), ("array<string>", "array<string>", "jsonb"),
    ("struct<id:bigint, country:string>", "struct<`id`:bigint,`country`:string>", "jsonb"),
    ("array<struct<a:decimal(5,1)>>", "array<struct<`a`:decimal(5,1)>>", "jsonb"),
])
def test_types_map_to_spark_and_postgres(raw, spark, postgres):
    t = parse_type(raw)
    assert (t.spark, t.postgres) == (spark, postgres)


@pytest.mark.parametrize("raw, message", [
    ("money", "'money' is not a type; use string, int"), ("decimal(40,2)", "1 <= p <= 38"),
    ("array<string", "is not closed"), ("struct<id bigint>", "fields are name:type"), ("int x", "left over"),
])
def test_bad_types_name_the_part_and_the_types(raw, message):
    with pytest.raises(TypeSyntaxError, match=message.replace("(", r"\(")):
        parse_type(raw)


def test_the_shipped_jobs_file_declares_the_demo_as_an_entry():
    jobs = load()
    assert "orders" in jobs and jobs["orders"].topic == "orders" and jobs["orders"].interval_target == "orders_hourly"
    assert jobs["orders"].columns["amount"].column_type.postgres == "numeric(12,2)"


def test_an_entry_of_design_7_loads_with_its_table(tmp_path):
    spec = read(write(tmp_path, ENTRY))["payments"]
    assert spec.table_columns() == ["topic", "partition", "offset", "kafka_timestamp", "payment_id", "amount",
                                    "currency", "paid_at", "card_last4", "refunded", "tags", "customer", "cust_id",
                                    "amount_eur"]
    assert spec.topics_option == ("subscribe", "payments") and spec.key == ["payment_id"]
    assert [*map(str, spec.columns["amount"].rules())] == ["required", "min 0", "max 1000000"]


BAD = [
    ("columns: {a: {type: money}}", "columns.a.type = 'money': type 'money': 'money' is not a type; use string"),
    ("columns: {a: {type: string, min: 1}}", "min/max do not apply to type string; use them on int"),
    ("columns: {a: {type: int, min: 5, max: 1}}", "min 5 is above max 1; make min at most max"),
    ("columns: {a: {type: bigint, pattern: 'x'}}", "pattern does not apply to type bigint"),
    ("columns: {a: {type: string, max_length: 0}}", "columns.a.max_length = 0"),
    ("columns: {a: {type: int}}\n    key: [b]", "key column(s) b are not columns of the table"),
    ("columns: {offset: {type: int}}", "column name 'offset' is taken by the platform"),
    ("format: raw\n    columns: {a: {type: int}}", "format raw keeps key, value and headers as they are"),
    ("columns: {}", "format json needs columns"),
    ("columns: {a: {type: int}}\n    volume: red", "volume\n  is not a setting here. The settings are: topic, "),
    ("colums: {a: {type: int}}", "colums\n  is not a setting here: did you mean 'columns'?"),
    ("columns: {a: {type: int, requird: true}}", "columns.a.requird\n  is not a setting here: did you mean "
                                                 "'required'? The settings are: type, required, min, max, in,"),
    ("columns: {a: {type: int}}\n    health: {max_lagg: 1}", "health.max_lagg\n  is not a setting here: did you "
                                                            "mean 'max_lag'?"),
    ("columns: {a: {type: int}}\n    trigger: soon", "trigger 'soon' is not a trigger"),
    ("columns: {a: {type: int}}\n    start: yesterday", "start 'yesterday' is not a start; use earliest, latest, "
                                                       "an ISO-8601 time ('2026-11-22T10:00:00Z') or group:NAME"),
    ("columns: {a: {type: int}}\n    start: '{\"0\": 5}'", "is not a start of a whole stream"),
    ("columns: {a: {type: int}}\n    start: '2999-01-01T00:00:00Z'", "is in the future"),
    ("columns: {a: {type: int, max: 2.5}}", "max 2.5 is not a whole number that fits int"),
    ("columns: {a: {type: int, max: 5000000000}}", "max 5000000000 is not a whole number that fits int"),
    ("columns: {a: {type: string, in: [EUR, NO]}}", "has values that are not text ([False]"),
]


@pytest.mark.parametrize("body, message", BAD)
def test_a_bad_entry_names_the_file_the_job_the_field_the_value_and_the_fix(tmp_path, body, message):
    path = write(tmp_path, f"jobs:\n  p:\n    topic: t\n    table: t\n    {body}\n")
    with pytest.raises(JobsFileError) as err:
        read(path)
    assert f"{path}: job 'p': " in str(err.value) and message in str(err.value), str(err.value)


@pytest.mark.parametrize("body, message", [
    ("", "must have a `jobs:` mapping"),
    ("jobs: [a, b]", "must have a `jobs:` mapping"),
    ("jobs:\n  'bad name':\n    topic: t\n    table: x\n    columns: {a: {type: int}}\n",
     "job name 'bad name' is not valid"),
    ("jobs:\n  j:\n    table: x\n    columns: {a: {type: int}}\n", "give exactly one of topic, topics or topic_pattern"),
    ("jobs: {j: [", "cannot read the jobs file"),
    ("jobs:\n  j:\n    topic: t\n    columns: {a: {type: int}}\n", "table\n  is required: add `table:` to the entry"),
])
def test_a_bad_jobs_file_names_the_job_and_the_field(tmp_path, body, message):
    with pytest.raises(JobsFileError) as err:
        read(write(tmp_path, body))
    assert message in str(err.value)


AVRO = {"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"},
                                                       {"name": "ms", "type": "long"}]}


@pytest.mark.parametrize("schema, message", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    (json.dumps({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nonsense"}]}),
     "is not an Avro schema"),
    (json.dumps({**AVRO, "fields": AVRO["fields"][:1]}), "the schema has no field for column(s) ms"),
])
def test_an_avro_schema_that_is_missing_broken_or_short_is_refused(tmp_path, schema, message):
    if schema is not None:
        (tmp_path / "click.avsc").write_text(schema)
    path = write(tmp_path, """\
        jobs:
          clicks:
            topic: clicks
            format: avro
            avro_schema: click.avsc
            columns: {url: {type: string}, ms: {type: bigint}}
            table: clicks
        """)
    with pytest.raises(JobsFileError) as err:
        read(path)
    assert "avro_schema 'click.avsc'" in str(err.value) and message in str(err.value), str(err.value)


def test_every_rule_is_an_expectation_and_quality_names_are_checked_against_gx(tmp_path):
    spec = read(write(tmp_path, ENTRY))["payments"]
    made = [(type(e).__name__, getattr(e, "column", None)) for e in from_rules(spec)]
    assert made == [
        ("ExpectColumnValuesToNotBeNull", "payment_id"), ("ExpectColumnValueLengthsToBeBetween", "payment_id"),
        ("ExpectColumnValuesToNotBeNull", "amount"), ("ExpectColumnValuesToBeBetween", "amount"),
        ("ExpectColumnValuesToBeInSet", "currency"), ("ExpectColumnValuesToNotBeNull", "paid_at"),
        ("ExpectColumnValuesToMatchRegex", "card_last4"), ("UnexpectedRowsExpectation", None)]
    assert [type(e).__name__ for e in extra(spec)] == ["ExpectColumnValuesToBeUnique"]
    assert class_name("expect_column_values_to_be_unique") == "ExpectColumnValuesToBeUnique"
    for bad, message in ((ENTRY.replace("expect_column_values_to_be_unique", "expect_magic"),
                          "is not a Great Expectations expectation"),
                         (ENTRY.replace("{column: payment_id}", "{colour: red}"), "does not fit")):
        with pytest.raises(Exception, match=message):
            extra(read(write(tmp_path, bad))["payments"])


def test_avro_values_become_json_text_in_plain_and_confluent_framing():
    import io

    import fastavro

    from streamfill.spark_jobs.pipelines.avro import to_json

    parsed = fastavro.parse_schema(AVRO)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"url": "/a", "ms": 7})
    datum = buf.getvalue()
    assert json.loads(to_json(datum, parsed)[0]) == {"url": "/a", "ms": 7}
    assert json.loads(to_json(b"\x00\x00\x00\x00\x2a" + datum, parsed, "confluent")[0]) == {"url": "/a", "ms": 7}
    assert to_json(datum, parsed, "confluent")[1].startswith("value is not in Confluent's wire format")
    text, error = to_json(b"\x07not avro", parsed)
    assert text is None and error.startswith("value is not Avro of the entry's schema")
    assert to_json(datum + b"extra", parsed)[1].endswith("bytes left over")


def test_whole_numbers_of_an_entry_refuse_yaml_booleans():
    """`max_offsets_per_trigger: true` is not 1: YAML booleans are refused where a whole number is expected."""
    from pydantic import ValidationError

    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

    with pytest.raises(ValidationError, match="max_offsets_per_trigger"):
        PipelineSpec.model_validate({"name": "x", "topic": "t", "columns": {"id": {"type": "bigint"}},
                                     "max_offsets_per_trigger": True})


def test_an_error_message_with_brackets_is_printed_whole(capsys):
    from streamfill.console import fail
    from streamfill.errors import OptionError

    exit_ = fail(OptionError("key", ["nope"], "names no declared column", "name declared columns, e.g. key: [a]"))
    assert exit_.code == 2  # bad input (docs/operations.md#exit-codes)
    assert "name declared columns, e.g. key: [a]" in capsys.readouterr().err.replace("\n", " ")


def test_max_offsets_per_trigger_zero_is_refused_not_replaced_by_the_entrys():
    from streamfill.errors import OptionError
    from streamfill.spark_jobs.stream_args import StreamArgs

    with pytest.raises(OptionError, match=r"--max-offsets-per-trigger 0 must be at least 1"):
        StreamArgs.from_flags(job="orders", max_offsets_per_trigger=0)

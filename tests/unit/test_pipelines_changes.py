"""Entries for tables that follow their topics (issue 46): `deletes: tombstone`, `format: debezium` with its
`position:`, and `route:` into several tables. What each accepts, what the sink is told about it, and each
refusal naming the field, the value and the fix."""

from __future__ import annotations

import json
import re
import textwrap
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from streamfill.changes import SOURCE_POSITION
from streamfill.spark_jobs.pipelines import JobsFileError, change_events, connect_types, mongo_json, read
from streamfill.spark_jobs.pipelines.columns import COORDINATES
from streamfill.spark_jobs.pipelines.debezium import after_record
from streamfill.spark_jobs.pipelines.registry import columns_of
from streamfill.spark_jobs.pipelines.routes import RouteTable
from streamfill.spark_jobs.pipelines.spec import PipelineSpec
from streamfill.spark_jobs.pipelines.typed_in_read import reader_options

pytestmark = pytest.mark.unit

CUSTOMERS = """\
jobs:
  customers:
    topic: customers
    columns:
      id:   {type: bigint}
      name: {type: string, required: true}
    table: customers
    key: [id]
    mode: replace
    deletes: tombstone
"""

CDC = """\
jobs:
  inventory:
    topic: pg.public.inventory
    format: debezium
    columns:
      id:    {type: bigint}
      sku:   {type: string, required: true}
      count: {type: int, min: 0}
    table: inventory
    key: [id]
"""

EVENTS = """\
jobs:
  events:
    topic: events
    columns:
      event_id: {type: string, required: true}
      amount:   {type: "decimal(12,2)", min: 0}
    derived:
      cents: "amount * 100"
    key: [event_id]
    mode: replace
    route:
      field: event_type
      tables:
        order: orders
        refund:
          table: sales.refunds
          columns:
            refund_id: {type: bigint, required: true}
            amount:    {type: "decimal(12,2)", field: refund.amount}
          key: [refund_id]
          mode: append-new
        7: orders
      unmatched: other_events
"""


def write(tmp_path, text: str):
    path = tmp_path / "jobs.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def entry(tmp_path, text: str) -> PipelineSpec:
    (spec,) = read(write(tmp_path, text)).values()
    return spec


def test_a_tombstone_entry_deletes_and_keeps_its_table_and_the_typed_read(tmp_path):
    spec = entry(tmp_path, CUSTOMERS)
    assert spec.can_delete and spec.deletes == "tombstone" and spec.route_tables() == []
    assert spec.table_columns() == [*COORDINATES, "id", "name"]
    assert "jsonColumns" in reader_options(spec)  # a tombstone's null value is left to Spark, the rest typed
    plain = entry(tmp_path, CUSTOMERS.replace("    deletes: tombstone\n", ""))
    assert not plain.can_delete and plain.deletes == "none"


def test_a_debezium_entry_replaces_by_default_and_gives_its_position_after_the_coordinates(tmp_path):
    spec = entry(tmp_path, CDC)
    assert (spec.mode, spec.can_delete, spec.position_path) == ("replace", True, "source.lsn")
    assert spec.table_columns() == [*COORDINATES, SOURCE_POSITION, "id", "sku", "count"]
    assert reader_options(spec) == {}  # the read cannot type an envelope's row: Spark's parse does
    assert entry(tmp_path, CDC + "    position: source.scn\n").position_path == "source.scn"
    none = entry(tmp_path, CDC + "    position: none\n")
    assert none.position_path is None and SOURCE_POSITION in none.table_columns()
    avro = entry(tmp_path, CDC.replace("    columns:\n", "    schema_registry: {}\n    columns:\n"))
    assert avro.avro_values and avro.wire_format == "confluent"
    assert not entry(tmp_path, CDC).avro_values


def test_a_routed_entry_gives_each_table_its_columns_key_and_mode_and_the_union_to_the_parse(tmp_path):
    spec = entry(tmp_path, EVENTS)
    assert spec.table == "orders" and not spec.can_delete and reader_options(spec) == {}
    tables = spec.route_tables()
    assert [(t.value, t.table, t.key, t.mode) for t in tables] == [
        ("order", "orders", ["event_id"], "replace"), ("refund", "sales.refunds", ["refund_id"], "append-new"),
        ("7", "orders", ["event_id"], "replace"), (None, "other_events", ["event_id"], "replace")]
    orders, refunds = tables[0], tables[1]
    assert isinstance(orders, RouteTable) and orders.columns == spec.columns and orders.derived == spec.derived
    assert orders.table_columns() == [*COORDINATES, "event_id", "amount", "cents"]
    assert refunds.table_columns() == [*COORDINATES, "refund_id", "amount", "cents"]  # the entry's derived
    assert refunds.columns["amount"].field == "refund.amount"
    assert [str(r) for r in refunds.rules("refund_id")] == ["required"]
    assert spec.table_columns() == [*COORDINATES, "event_id", "amount", "refund_id", "cents"]
    assert list(spec.all_columns) == ["event_id", "amount", "refund_id"]
    with pytest.raises(AttributeError):
        orders.table = "x"  # frozen: the sink's options are built from it


def test_unmatched_records_are_dead_letters_unless_a_table_takes_them(tmp_path):
    spec = entry(tmp_path, EVENTS.replace("      unmatched: other_events\n", ""))
    assert spec.route.unmatched == "dead_letters" and [t.value for t in spec.route_tables()] == ["order", "refund",
                                                                                                 "7"]
    listed = entry(tmp_path, EVENTS.replace("unmatched: other_events", "unmatched: orders"))
    assert [t.table for t in listed.route_tables()] == ["orders", "sales.refunds", "orders"]


def test_a_registry_entry_of_debezium_takes_its_columns_from_the_after_record():
    row = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "int"},
                                                         {"name": "sku", "type": ["null", "string"], "default": None}]}
    envelope = {"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    assert after_record(envelope) == row
    qualified = {**envelope, "namespace": "pg.public.inventory", "fields": [
        {**envelope["fields"][0]}, {"name": "after", "type": ["null", "pg.public.inventory.Value"]}]}
    assert after_record(qualified) == row  # Debezium names the row's record again by its full name
    spec = PipelineSpec(name="cdc", topic="cdc", format="debezium", schema_registry={}, table="cdc", key=["id"])
    assert spec.columns_from_registry and spec.mode == "replace"
    resolved = spec.with_columns(columns_of(after_record(envelope)), envelope)
    assert list(resolved.columns) == ["id", "sku"] and resolved.registry_reader_schema == envelope
    assert resolved.mode == "replace" and resolved.table_columns()[4] == SOURCE_POSITION
    with pytest.raises(ValueError, match="is not a Debezium change event .* declare columns: in the entry"):
        after_record(row)


def test_a_routed_registry_entry_checks_the_keys_of_its_tables_once_the_columns_come(tmp_path):
    spec = PipelineSpec(name="e", topic="e", format="avro", schema_registry={}, key=["id"], mode="replace",
                        route={"field": "kind", "tables": {"a": "t_a", "b": "t_b"}})
    assert spec.columns_from_registry and spec.table == "t_a"
    resolved = spec.with_columns({"id": {"type": "bigint"}, "kind": {"type": "string"}}, {"type": "record"})
    assert [list(t.columns) for t in resolved.route_tables()] == [["id", "kind"], ["id", "kind"]]
    with pytest.raises(ValueError, match="key column.s. id are not columns of route table t_a"):
        spec.with_columns({"other": {"type": "bigint"}}, {"type": "record"})


BAD = [
    # deletes
    (CUSTOMERS.replace("mode: replace", "mode: append-new"),
     "deletes: tombstone removes rows, which mode append-new never does; set mode: replace"),
    (CUSTOMERS.replace("    key: [id]\n", ""),
     "deletes: tombstone needs a business key: the columns its Kafka key names a row by (key is ['topic', "
     "'partition', 'offset'], which no tombstone carries); e.g. key: [id]"),
    (CUSTOMERS.replace("deletes: tombstone", "deletes: soft"), "deletes = 'soft': Input should be 'none' or "
                                                               "'tombstone'"),
    ("jobs:\n  raw:\n    topic: t\n    format: raw\n    table: t\n    key: [key]\n    mode: replace\n"
     "    deletes: tombstone\n", "deletes: tombstone reads a tombstone's key into the key columns, and format raw "
                                 "has none; use format json, avro or debezium"),
    (CUSTOMERS.replace("name: {type", "_delete: {type"), "column name '_delete' is taken by the platform"),
    # debezium
    (CDC + "    mode: append-new\n", "mode append-new keeps a key's first version, and format debezium applies "
                                     "each change to its row; remove mode (format debezium's default is replace)"),
    (CDC.replace("    key: [id]\n", ""), "format debezium needs key: the source table's primary key columns, which "
                                          "its changes name rows by (key is ['topic', 'partition', 'offset']); "
                                          "e.g. key: [id]"),
    (CDC.replace("count: {type", "source_position: {type"), "column name 'source_position' is taken by the "
                                                            "platform"),
    (CDC + "    derived: {source_position: \"1\"}\n", "derived column(s) source_position already exist"),
    (CDC + "    position: 'source..lsn'\n", "position 'source..lsn' is not a path into the change event; use names "
                                            "joined by dots, e.g. position: source.lsn"),
    (CUSTOMERS + "    position: source.lsn\n", "position 'source.lsn' is the place of a Debezium change event in its "
                                               "source's log and applies to format debezium only; remove it"),
    (CUSTOMERS + "    schema_registry: {}\n", "schema_registry is for Avro values in Confluent's wire format; set "
                                              "format: avro (or format: debezium for Avro change events)"),
    (CDC + "    avro_schema: x.avsc\n", "avro_schema is only for format avro, not debezium"),
    # routes
    (EVENTS.replace("    columns:\n      event_id", "    format: debezium\n    columns:\n      event_id"),
     "route reads each record's table from its value, for format json or avro, not debezium; remove route"),
    (EVENTS.replace("    mode: replace\n", "    mode: replace\n    deletes: tombstone\n"),
     "route and deletes: tombstone do not go together: a tombstone has no value to route by"),
    (EVENTS.replace('amount:    {type: "decimal(12,2)", field', 'amount:    {type: double, field'),
     "column amount is decimal(12,2) in table orders but double in table sales.refunds; a column the parse gives "
     "several tables has one type: give both the same type, or the columns different names"),
    (EVENTS.replace("key: [refund_id]", "key: [event_id]"),
     "key column(s) event_id are not columns of route table sales.refunds (columns: topic, partition, offset, "
     "kafka_timestamp, refund_id, amount, cents); name declared columns, e.g. key: [refund_id]"),
    (EVENTS.replace("      event_id: {type: string, required: true}\n      amount:   {type: \"decimal(12,2)\", "
                    "min: 0}\n", "      {}\n").replace("    columns:\n      {}\n", "").replace(
                        "    derived:\n      cents: \"amount * 100\"\n", "").replace("    key: [event_id]\n", ""),
     "route table orders takes the entry's columns, and the entry declares none; give columns: at the entry, or "
     "the table as {table: orders, columns: {...}}"),
    (EVENTS.replace("    key: [event_id]\n", "    table: orders_all\n    key: [event_id]\n"),
     "table 'orders_all' beside route: a routed entry writes the tables under route.tables; remove table: (its "
     "table is the first of them, orders)"),
    (EVENTS.replace("field: event_type", "field: 'event type'"),
     "route.field = 'event type': route field 'event type' is not a path into the value"),
    (EVENTS.replace("unmatched: other_events", "unmatched: a.b.c"), "route.unmatched = 'a.b.c'"),
    (EVENTS.replace("        7: orders\n", "        7: sales.refunds\n"),
     "route values refund and 7 both write table sales.refunds with different columns, derived, key or mode; "
     "give the table one definition"),
    (EVENTS.replace("    derived:\n      cents:", "    derived:\n      refund_id:"),
     "derived column refund_id of table orders is also a column; give it another name"),
    (EVENTS.replace("          mode: append-new\n", "          mode: append-new\n          colums: {}\n"),
     "route.tables.refund.colums\n  is not a setting here: did you mean 'columns'? The settings are: table, "
     "columns, derived, key, mode"),
    (EVENTS.replace("      tables:\n", "      tables: {}\n      ignored:\n"), "route.tables"),
]


@pytest.mark.parametrize("body, message", BAD)
def test_an_entry_that_cannot_follow_its_topic_is_refused_naming_the_field_value_and_fix(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(JobsFileError) as err:
        read(path)
    assert f"{path}: job '" in str(err.value) and message in str(err.value), str(err.value)


def test_jobs_check_shows_the_position_the_deletes_and_each_route_table(tmp_path, monkeypatch):
    from streamfill.cli.commands.jobs import app

    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    for text, shown in [
        (CDC, ["job inventory: table inventory (debezium, key id, replace)", "source_position", "numeric(38,0)",
               "position: by its connector: source.lsn (PostgreSQL); source.scn (Oracle); source.commit_lsn (SQL "
               "Server); Kafka's order (MySQL, MariaDB, MongoDB)", "op d deletes before's key, a tombstone is "
               "ignored"]),
        (CUSTOMERS, ["(json, deletes tombstone, key id, replace)",
                     "a tombstone (null value) deletes the row its Kafka key names"]),
        (EVENTS, ["job events: table orders (json, event_type = order, key event_id, replace)",
                  "job events: table sales.refunds (json, event_type = refund, key refund_id, append-new)",
                  "job events: table other_events (json, records no route names, key event_id, replace)",
                  "required, key (field refund.amount)"[len("required, key "):]]),
    ]:
        result = runner.invoke(app, ["check", str(write(tmp_path, text))])
        assert result.exit_code == 0, result.output
        # a console made before COLUMNS was set wraps the table's cells: their text read without the borders
        flat = " ".join(re.sub(r"[│┃┏┓┗┛━┡┩┳╇└┘┴─]", " ", result.output).split())
        assert all(" ".join(s.split()) in flat for s in shown), result.output


def test_the_quality_of_a_routed_entry_checks_each_table_by_that_tables_rules_and_key(tmp_path):
    from streamfill.errors import OptionError
    from streamfill.spark_jobs.pipelines.expectations import extra, from_rules
    from streamfill.spark_jobs.quality import checked_tables

    first_own = EVENTS.replace("        order: orders\n        refund:", "        refund:").replace(
        "        7: orders\n", "        order: orders\n")
    spec = entry(tmp_path, first_own)
    assert spec.table == "sales.refunds"
    made = [(type(e).__name__, getattr(e, "column", None)) for e in from_rules(spec)]
    assert made == [("ExpectColumnValuesToNotBeNull", "refund_id"), ("UnexpectedRowsExpectation", None)]
    assert "key (refund_id) is unique" in from_rules(spec)[-1].description

    # every table once, each with its own rules and key; one of them alone; a table not the entry's is refused
    tables = checked_tables(spec, None)
    assert [name for name, _ in tables] == ["sales.refunds", "orders", "other_events"]
    orders = [(type(e).__name__, getattr(e, "column", None)) for e in from_rules(spec, tables[1][1])]
    assert orders == [("ExpectColumnValuesToNotBeNull", "event_id"), ("ExpectColumnValuesToBeBetween", "amount"),
                      ("UnexpectedRowsExpectation", None)]
    assert "key (event_id) is unique" in from_rules(spec, tables[1][1])[-1].description
    assert [name for name, _ in checked_tables(spec, "orders")] == ["orders"]
    assert [name for name, _ in checked_tables(entry(tmp_path, EVENTS), None)] == [
        "orders", "sales.refunds", "other_events"], "a table two route values share is checked once"
    with pytest.raises(OptionError, match="option table='sales.orders': is not one of the tables of the routed job"):
        checked_tables(spec, "sales.orders")

    # an entry's quality: list goes to the tables that have its columns, and names columns one of them has
    listed = entry(tmp_path, first_own + "    quality:\n      - expect_column_values_to_be_unique: {column: event_id}\n")
    assert [len(extra(listed, routed)) for _, routed in checked_tables(listed, None)] == [0, 1, 1]
    typo = entry(tmp_path, first_own + "    quality:\n      - expect_column_values_to_be_unique: {column: evnt_id}\n")
    with pytest.raises(OptionError, match="names evnt_id, which no table of the routed job 'events' has"):
        extra(typo)


DATA = Path(__file__).parents[1] / "data"


def documented(connector: str, name: str) -> bytes:
    return (DATA / "debezium" / connector / f"{name}.json").read_bytes()


MICROS = 1529507596945104  # Debezium's docs: TIMESTAMP '2018-06-20 15:13:16.945104' as a MicroTimestamp
SEMANTIC_VALUES = [
    # (schema name, parameters, value as JsonConverter writes it, as fastavro decodes it, what lands)
    ("org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "C+o=", Decimal("30.50"), "30.50"),
    ("org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "AJw=", Decimal("1.56"), "1.56"),  # Kafka's tests
    ("org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "/0M=", Decimal("-1.89"), "-1.89"),
    ("org.apache.kafka.connect.data.Decimal", {"scale": "0"}, "AQ==", Decimal("1"), "1"),
    ("io.debezium.data.VariableScaleDecimal", {}, {"scale": 3, "value": "MDk="}, {"scale": 3, "value": b"09"},
     "12.345"),
    ("org.apache.kafka.connect.data.Date", {}, 10000, date(1997, 5, 19), "1997-05-19"),
    ("io.debezium.time.Date", {}, 17702, 17702, "2018-06-20"),
    ("io.debezium.time.Date", {}, -1, -1, "1969-12-31"),
    ("org.apache.kafka.connect.data.Time", {}, 14400000, time(4), "04:00:00"),
    ("io.debezium.time.Time", {}, 45296789, 45296789, "12:34:56.789"),
    ("io.debezium.time.MicroTime", {}, 45296000001, 45296000001, "12:34:56.000001"),
    ("io.debezium.time.NanoTime", {}, 45296123456789, 45296123456789, "12:34:56.123456789"),
    ("org.apache.kafka.connect.data.Timestamp", {}, 4000000000,
     datetime(1970, 2, 16, 7, 6, 40, tzinfo=timezone.utc), "1970-02-16T07:06:40Z"),
    ("io.debezium.time.Timestamp", {}, 1562630400000, 1562630400000, "2019-07-09T00:00:00Z"),
    ("io.debezium.time.MicroTimestamp", {}, MICROS, MICROS, "2018-06-20T15:13:16.945104Z"),
    ("io.debezium.time.NanoTimestamp", {}, 1522110896125456789, 1522110896125456789,
     "2018-03-27T00:34:56.125456789Z"),
    ("io.debezium.time.MicroTimestamp", {}, -1, -1, "1969-12-31T23:59:59.999999Z"),
    ("io.debezium.time.ZonedTimestamp", {}, "2018-06-20T13:37:03Z", "2018-06-20T13:37:03Z", "2018-06-20T13:37:03Z"),
    ("io.debezium.time.ZonedTime", {}, "04:05:11.789Z", "04:05:11.789Z", "04:05:11.789Z"),
    ("io.debezium.time.IsoDate", {}, "2017-09-15Z", "2017-09-15Z", "2017-09-15"),
    ("io.debezium.time.IsoTimestamp", {}, "2019-07-09T02:28:57.123456Z", "2019-07-09T02:28:57.123456Z",
     "2019-07-09T02:28:57.123456Z"),
    ("io.debezium.time.StructuredTimestamp", {}, {"year": 2018, "month": 6, "day": 20, "hour": 15, "minute": 13,
                                                  "second": 16, "nanos": 945104000, "precision": 6},
     {"year": 2018, "month": 6, "day": 20, "hour": 15, "minute": 13, "second": 16, "nanos": 945104000},
     "2018-06-20T15:13:16.945104Z"),
    ("io.debezium.time.StructuredZonedTimestamp", {}, {"year": 2018, "month": 6, "day": 20, "hour": 13, "minute": 37,
                                                       "second": 3, "nanos": 0, "offsetSeconds": 7200},
     {"year": 2018, "month": 6, "day": 20, "hour": 13, "minute": 37, "second": 3, "nanos": 0, "offsetSeconds": 7200},
     "2018-06-20T13:37:03+02:00"),
    ("io.debezium.data.Uuid", {}, "0b4e9f6a-1c46-4f7b-9d76-7a2f7d0c3b11", "0b4e9f6a-1c46-4f7b-9d76-7a2f7d0c3b11",
     "0b4e9f6a-1c46-4f7b-9d76-7a2f7d0c3b11"),
    ("io.debezium.data.Enum", {"allowed": "new,paid"}, "paid", "paid", "paid"),
    ("io.debezium.data.Bits", {"length": "3"}, "BQ==", b"\x05", "101"),
    ("io.debezium.data.Bits", {"length": "10"}, "AQI=", b"\x01\x02", "1000000001"),
    ("io.debezium.data.geometry.Point", {}, {"x": 1.0, "y": 2.0, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": None},
     {"x": 1.0, "y": 2.0, "wkb": bytes.fromhex("0101000000000000000000F03F0000000000000040"), "srid": None},
     {"x": 1.0, "y": 2.0, "wkb": "0101000000000000000000F03F0000000000000040", "srid": None}),
]


@pytest.mark.parametrize("name, parameters, written, decoded, landed", SEMANTIC_VALUES,
                         ids=[f"{v[0].rpartition('.')[2]}-{n}" for n, v in enumerate(SEMANTIC_VALUES)])
def test_each_semantic_type_lands_as_the_source_value_from_json_and_from_avro(name, parameters, written, decoded,
                                                                               landed):
    convert = connect_types.of_connect({"type": "x", "name": name, "parameters": parameters})
    assert convert(written) == landed
    assert connect_types.of_avro({"type": "x", "connect.name": name, "connect.parameters": parameters}, {})(
        decoded) == landed
    assert convert(None) is None


def test_a_json_column_reads_debeziums_json_text_as_that_json_and_nested_schemas_are_read_through():
    schema = {"type": "struct", "fields": [
        {"type": "string", "name": "io.debezium.data.Json", "field": "doc"},
        {"type": "array", "items": {"type": "int32", "name": "io.debezium.time.Date"}, "field": "days"},
        {"type": "map", "keys": {"type": "string"}, "values": {"type": "bytes", "name":
                                                                "org.apache.kafka.connect.data.Decimal",
                                                                "parameters": {"scale": "1"}}, "field": "prices"},
        {"type": "string", "field": "note"}]}
    got = connect_types.of_connect(schema)({"doc": '{"a": [1, 2.50]}', "days": [0, 1], "prices": {"x": "Dw=="},
                                            "note": "n"})
    assert msgspec.json.encode(got) == b'{"doc":{"a": [1, 2.50]},"days":["1970-01-01","1970-01-02"],' \
                                       b'"prices":{"x":"1.5"},"note":"n"}'


def test_a_real_sql_server_event_decodes_its_decimals_and_timestamp():
    """Debezium Server's documented Redis output of a SQL Server delete (tests/data/debezium/README.md)."""
    event = json.loads(documented("sqlserver", "emp_delete"))
    row = dict(fields_of(event["schema"])["before"])
    convert = connect_types.of_connect(row)
    assert {k: v for k, v in convert(event["payload"]["before"]).items() if k in ("sal", "comm", "hiredate")} == {
        "sal": "200000.0000", "comm": "10.0000", "hiredate": "2019-07-09T00:00:00Z"}


def fields_of(schema: dict) -> dict:
    return {f["field"]: f for f in schema["fields"]}


@pytest.mark.parametrize("name, parameters, value, reason", [
    ("org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "C+o",
     "price (org.apache.kafka.connect.data.Decimal, scale 2) cannot be decoded: C+o is not base64"),
    ("org.apache.kafka.connect.data.Decimal", {}, "C+o=",
     "price (org.apache.kafka.connect.data.Decimal) cannot be decoded: C+o= has no scale in its schema's "
     "parameters"),
    ("io.debezium.data.VariableScaleDecimal", {}, {"value": "AQ=="},
     'price (io.debezium.data.VariableScaleDecimal) cannot be decoded: {"value":"AQ=="} is not a struct of scale '
     "and value"),
    ("io.debezium.time.Date", {}, 1.5, "price (io.debezium.time.Date) cannot be decoded: 1.5 is not a whole number"),
    ("io.debezium.time.MicroTimestamp", {}, 9223372036825200000,
     "price (io.debezium.time.MicroTimestamp) cannot be decoded: 9223372036825200000 is outside the dates "
     "0001-01-01 to 9999-12-31"),
    ("io.debezium.time.MicroTime", {}, -5, "price (io.debezium.time.MicroTime) cannot be decoded: -5 is not a time "
                                           "of day"),
    ("io.debezium.data.Bits", {"length": "3"}, "Dw==",
     "price (io.debezium.data.Bits, length 3) cannot be decoded: Dw== has more than 3 bits"),
    ("io.debezium.data.Json", {}, "{nope", "price (io.debezium.data.Json) cannot be decoded: {nope is not JSON text"),
    ("io.debezium.time.StructuredTimestamp", {}, {"specialValue": "POSITIVE_INFINITY"},
     'price (io.debezium.time.StructuredTimestamp) cannot be decoded: {"specialValue":"POSITIVE_INFINITY"} is '
     "POSITIVE_INFINITY, which a date or time column cannot hold"),
])
def test_a_value_its_semantic_type_cannot_read_names_the_column_the_type_and_the_value(name, parameters, value,
                                                                                        reason):
    with pytest.raises(connect_types.Undecodable) as err:
        connect_types.of_connect({"name": name, "parameters": parameters})(Decimal("1.5") if value == 1.5 else value)
    assert err.value.reason("price") == reason


def test_mongodb_extended_json_reads_as_plain_values():
    document = {"_id": {"$oid": "596e275826f08b2730779e1f"}, "n": {"$numberLong": "1004"}, "i": {"$numberInt": "7"},
                "d": {"$numberDouble": "1.5"}, "nan": {"$numberDouble": "NaN"}, "price": {"$numberDecimal": "30.50"},
                "at": {"$date": {"$numberLong": "1529507596945"}}, "relaxed": {"$date": "2018-06-20T15:13:16.945Z"},
                "legacy": {"$date": 1529507596945},
                "uuid": {"$binary": {"base64": "C06fahxGT3uddnovfQw7EQ==", "subType": "04"}},
                "bin": {"$binary": "AQI=", "$type": "00"}, "ts": {"$timestamp": {"t": 1, "i": 2}},
                "nested": [{"k": {"$numberLong": "1"}}], "plain": {"a": 1}}
    assert mongo_json.plain(document) == {
        "_id": "596e275826f08b2730779e1f", "n": 1004, "i": 7, "d": 1.5, "nan": "NaN", "price": "30.50",
        "at": "2018-06-20T15:13:16.945Z", "relaxed": "2018-06-20T15:13:16.945Z", "legacy": "2018-06-20T15:13:16.945Z",
        "uuid": "0b4e9f6a-1c46-4f7b-9d76-7a2f7d0c3b11", "bin": "AQI=", "ts": {"$timestamp": {"t": 1, "i": 2}},
        "nested": [{"k": 1}], "plain": {"a": 1}}


PEOPLE = dict(name="people", topic="t", table="people", format="debezium", key=["id"], deletes="tombstone",
              columns={"id": {"type": "bigint"}, "first_name": {"type": "string"}, "email": {"type": "string"}})


def read_event(spec: PipelineSpec, value: bytes, key: bytes | None = None) -> change_events.Result:
    return change_events.reader_of(spec).read(value, key)


def test_the_reader_takes_each_connectors_position_and_each_ops_row():
    spec = PipelineSpec(**PEOPLE)
    positions = {c: read_event(spec, documented(c, "create")).position for c in ("postgresql", "mysql", "sqlserver")}
    assert positions == {"postgresql": "24023128", "mysql": None, "sqlserver": str(0x00000027000007580005)}
    deleted = read_event(spec, documented("postgresql", "delete"))
    assert (json.loads(deleted.document), deleted.deletes, deleted.key_source) == ({"id": 1}, True, "before of op d")
    oracle = read_event(spec, documented("oracle", "create"))  # the docs' Oracle event names no connector
    assert oracle.error == ("the change event has no source.lsn; set position: to the field that orders the "
                            "connector's changes, or position: none")
    mongo = PipelineSpec(**{**PEOPLE, "columns": {**PEOPLE["columns"], "id": {"type": "bigint", "field": "_id"}}})
    update = read_event(mongo, documented("mongodb", "update"))
    assert (json.loads(update.document)["_id"], update.position) == (1004, None)
    event = json.loads(documented("mongodb", "delete"))
    del event["payload"]["before"]
    gone = read_event(mongo, json.dumps(event).encode(), documented("mongodb", "key"))
    assert (json.loads(gone.document), gone.deletes, gone.key_source) == ({"_id": 1004}, True, "Kafka key of op d")
    assert read_event(mongo, json.dumps(event).encode()).error == "op d has no before: the row to delete is unknown"
    event["payload"].update(op="u", after=None)
    assert read_event(mongo, json.dumps(event).encode()).error == (
        "op u has no after; MongoDB's connector sends the document of an update with capture.mode "
        "change_streams_update_full")


def test_the_reader_keeps_what_it_does_not_convert_as_written():
    spec = PipelineSpec(**{**PEOPLE, "columns": {**PEOPLE["columns"], "score": {"type": "double"},
                                                 "price": {"type": "decimal(38,19)"}}})
    value = (b'{"op": "c", "after": {"id": 1, "score": NaN, "price": 1.0049999999999999999, "email": "a\\u00e9"},'
             b' "source": {"lsn": 5}}')
    got = read_event(spec, value)
    assert got.error is None and got.document == b'{"id":1,"score":NaN,"price":1.0049999999999999999,"email":"a\xc3\xa9"}'
    assert read_event(spec, b'{"op": "c", "after": {"id": 1, "price": "C+o="}, "source": {"lsn": 5}}').document == \
        b'{"id":1,"price":"0.0000000000000003050"}'
    assert read_event(spec, b'[1]').error == "invalid JSON"


def test_a_debezium_registry_entry_types_its_columns_by_their_semantic_types():
    row = {"type": "record", "name": "Value", "fields": [
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2,
                                            "connect.name": "org.apache.kafka.connect.data.Decimal"}]},
        {"name": "created", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}},
        {"name": "shipped", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
        {"name": "doc", "type": {"type": "string", "connect.name": "io.debezium.data.Json"}},
        {"name": "at", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}}]}
    assert {n: c["type"] for n, c in columns_of(row, semantic=True).items()} == {
        "price": "decimal(10,2)", "created": "timestamp", "shipped": "date", "doc": "json", "at": "string"}
    assert columns_of(row)["created"]["type"] == "bigint", "an Avro entry reads the number as it is"


BAD_SETTINGS = [
    ({"decimal.handling.mode": "exact"}, "debezium.decimal.handling.mode = 'exact': decimal.handling.mode 'exact' is "
                                         "not one of Debezium's modes (precise, double, string); copy the value of "
                                         "the connector's decimal.handling.mode (without one it is precise)"),
    ({"time.precision.mode": "micro"}, "time.precision.mode 'micro' is not one of Debezium's modes (adaptive, "
                                       "adaptive_time_microseconds, connect, microseconds, nanoseconds, isostring, "
                                       "structured)"),
    ({"column.types": {"at": "x"}}, "The settings are: decimal.handling.mode, time.precision.mode, semantic.types"),
    ({"semantic.types": {"at": "Instant"}}, "semantic.types.at 'Instant' is not a semantic type streamfill reads"),
    ({"semantic.types": {"other": "MicroTimestamp"}}, "debezium.semantic.types names 'other', which is no column "
                                                      "of the entry (columns: id, sku, at); name a declared column"),
    ({"semantic.types": {"sku": "Date", "at": "MicroTimestamp"}}, "debezium.semantic.types.sku 'Date' does not land "
                                                                  "in column sku's type int"),
    ({}, "column(s) at (timestamp) of an event without a schema: under time.precision.mode adaptive the connector "
         "writes a TIMESTAMP in milliseconds, microseconds or nanoseconds by the source column's precision, which "
         "the event does not carry; name each one's type, e.g. debezium: {semantic.types: {at: MicroTimestamp}}"),
]


@pytest.mark.parametrize("settings, message", BAD_SETTINGS)
def test_debezium_settings_are_refused_naming_the_setting_the_value_and_the_fix(tmp_path, settings, message):
    body = CDC.replace("      count: {type: int, min: 0}\n", "      sku: {type: int}\n      at: {type: timestamp}\n") \
        .replace("      sku:   {type: string, required: true}\n", "")
    path = write(tmp_path, body + f"    debezium: {json.dumps(settings)}\n")
    with pytest.raises(JobsFileError) as err:
        read(path)
    assert message in str(err.value), str(err.value)


def test_debezium_settings_read_events_without_a_schema_and_belong_to_debezium_entries(tmp_path):
    spec = entry(tmp_path, CDC + "    debezium: {time.precision.mode: connect, semantic.types: {sku: Json}}\n")
    assert spec.debezium.semantic_type("sku") == "io.debezium.data.Json"
    reader = change_events.reader_of(spec)
    assert (reader.decimal_mode, reader.time_mode) == ("precise", "connect")
    assert dict(reader.upserts)["sku"].semantic == "io.debezium.data.Json"
    with pytest.raises(JobsFileError, match="debezium: says how a Debezium connector wrote values; it applies to "
                                            "format debezium only, not json; remove it or set format: debezium"):
        read(write(tmp_path, CUSTOMERS + "    debezium: {}\n"))


def test_version_names_a_number_date_or_time_column_of_a_replace_entry():
    entry = dict(name="x", topic="t", table="x", key=["id"], mode="replace",
                 columns={"id": {"type": "string"}, "seq": {"type": "bigint"}, "at": {"type": "timestamp"},
                          "note": {"type": "string"}})
    assert PipelineSpec(**entry).version_column is None, "the default: the Kafka timestamp"
    assert PipelineSpec(**entry, version="seq").version_column == "seq"
    assert PipelineSpec(**entry, version="at").version_column == "at"
    with pytest.raises(ValueError, match="version 'note' is not a number, date or time column of the entry"):
        PipelineSpec(**entry, version="note")
    with pytest.raises(ValueError, match="version 'seq' orders the versions of a key, which only a mode replace"):
        PipelineSpec(**{**entry, "mode": "append-new"}, version="seq")
    debezium = {**entry, "format": "debezium"}
    with pytest.raises(ValueError, match="version 'seq' beside position source.lsn"):
        PipelineSpec(**debezium, version="seq")
    assert PipelineSpec(**debezium, version="seq", position="none").version_column == "seq"

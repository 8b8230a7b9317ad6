"""Entries for tables that follow their topics (issue 46): `deletes: tombstone`, `format: debezium` with its
`position:`, and `route:` into several tables. What each accepts, what the sink is told about it, and each
refusal naming the field, the value and the fix."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from streamfill.changes import SOURCE_POSITION
from streamfill.spark_jobs.pipelines import JobsFileError, read
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
               "position: the change event's source.lsn", "op d deletes before's key, a tombstone is ignored"]),
        (CUSTOMERS, ["(json, deletes tombstone, key id, replace)",
                     "a tombstone (null value) deletes the row its Kafka key names"]),
        (EVENTS, ["job events: table orders (json, event_type = order, key event_id, replace)",
                  "job events: table sales.refunds (json, event_type = refund, key refund_id, append-new)",
                  "job events: table other_events (json, records no route names, key event_id, replace)",
                  "required, key (field refund.amount)"[len("required, key "):]]),
    ]:
        result = runner.invoke(app, ["check", str(write(tmp_path, text))])
        assert result.exit_code == 0, result.output
        assert all(s in result.output for s in shown), result.output


def test_the_quality_of_a_routed_entry_checks_its_first_table_by_that_tables_rules_and_key(tmp_path):
    from streamfill.spark_jobs.pipelines.expectations import from_rules

    first_own = EVENTS.replace("        order: orders\n        refund:", "        refund:").replace(
        "        7: orders\n", "        order: orders\n")
    spec = entry(tmp_path, first_own)
    assert spec.table == "sales.refunds"
    made = [(type(e).__name__, getattr(e, "column", None)) for e in from_rules(spec)]
    assert made == [("ExpectColumnValuesToNotBeNull", "refund_id"), ("UnexpectedRowsExpectation", None)]
    assert "key (refund_id) is unique" in from_rules(spec)[-1].description

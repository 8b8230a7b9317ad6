"""`streamfill jobs from-connect` over every Kafka Connect configuration of tests/data/connect/ as its documentation
shows it (the README there names each one's origin): each becomes entries the project's own validation takes, as
`jobs check` reads them, or is refused naming every setting it cannot carry."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamfill import REPO_ROOT
from streamfill.errors import OptionError
from streamfill.spark_jobs.pipelines import read_each
from streamfill.spark_jobs.pipelines.connect_columns import ExistingTable, TableColumn
from streamfill.spark_jobs.pipelines.connect_config import (
    CONFLUENT,
    Choices,
    NotCarried,
    Translation,
    translate,
)
from streamfill.spark_jobs.pipelines.connect_forms import ConnectorConfig, properties, read

pytestmark = pytest.mark.unit

DATA = REPO_ROOT / "tests" / "data" / "connect"
OURS = ("localhost", 5432, "streamfill")  # streamfill's own database in these tests

# every file: ("entry", what its entry says) or ("refused", the settings named)
EXPECTED: dict[str, tuple[str, object]] = {
    "confluent_jdbc_sink/debezium_blog_record_value.json": (
        "refused", {"transforms.unwrap.delete.handling.mode", "transforms.unwrap.drop.tombstones"}),
    "confluent_jdbc_sink/end_to_end_avro.json": ("entry", {
        "jdbc-sink": {"topic": "dbserver1_inventory_Hike", "format": "debezium",
                      "schema_registry": {"url": "http://schema-registry:8081"}, "table": "dbserver1_inventory_Hike",
                      "key": ["id"], "mode": "replace", "start": "group:connect-jdbc-sink",
                      "postgres_conn_id": "postgres_inventory"}}),
    "confluent_jdbc_sink/postgres_toast_flat_config.json": ("entry", {
        "sink-connector": {"topic": "dbserver1.inventory.customers", "format": "debezium",
                           "columns": {"id": {"type": "string"}}, "table": "inventorysink.customers", "key": ["id"],
                           "mode": "replace", "start": "group:connect-sink-connector",
                           "postgres_conn_id": "postgres_sinkdb"}}),
    "confluent_jdbc_sink/sink_quickstart_sqlite.properties": ("refused", {"connection.url", "pk.mode"}),
    "confluent_jdbc_sink/unwrap_mongodb_smt.json": ("entry", {
        "jdbc-sink": {"topic": "customers", "format": "debezium", "columns": {"id": {"type": "string", "field": "_id"}},
                      "table": "customers", "key": ["id"], "mode": "replace", "start": "group:connect-jdbc-sink",
                      "postgres_conn_id": "postgres_inventorydb"}}),
    "confluent_jdbc_sink/unwrap_smt_record_key.json": ("entry", {
        "jdbc-sink": {"topic": "customers", "format": "debezium", "columns": {"id": {"type": "string"}},
                      "table": "customers", "key": ["id"], "mode": "replace", "start": "group:connect-jdbc-sink",
                      "postgres_conn_id": "postgres_inventory"}}),
    "debezium_jdbc_sink/cqrs_mysql_sink.json": ("refused", {"connection.url", "collection.name.format"}),
    "debezium_jdbc_sink/dead_letter_queue.json": ("refused", {"connector.class", "name"}),
    "debezium_jdbc_sink/jdbc_connector.json": ("refused", {"primary.key.fields"}),
    "debezium_jdbc_sink/jdbc_connector_2_7.json": ("refused", {"primary.key.fields"}),
    "debezium_jdbc_sink/passthrough_collection_naming.json": ("refused", {"connector.class", "name"}),
    "debezium_jdbc_sink/unwrap_smt.json": ("entry", {
        "jdbc-sink": {"topic": "customers", "format": "debezium", "columns": {"id": {"type": "string"}},
                      "table": "customers", "key": ["id"], "mode": "replace", "start": "group:connect-jdbc-sink",
                      "postgres_conn_id": "postgres_inventory"}}),
    "kafka_connect/error_handling.properties": ("refused", {"connector.class", "name"}),
    "kafka_connect/error_handling_defaults.properties": ("refused", {"connector.class", "name"}),
    "kafka_connect/sink_offsets.json": ("refused", {"CONNECTOR"}),
    "transforms/extract_new_record_state.properties": ("refused", {"connector.class", "name"}),
    "transforms/regexrouter_debezium_topic_to_table.json": ("refused", {"connector.class", "name"}),
    "transforms/regexrouter_drop_prefix.json": ("refused", {"connector.class", "name"}),
}


def config_of(path: str) -> ConnectorConfig:
    return read((DATA / path).read_text(), str(DATA / path))


def merged(base: str, *fragments: str, **settings: str) -> ConnectorConfig:
    """A configuration of the docs with the settings of fragments the docs show alone, and a few of the test's."""
    first = config_of(base)
    out = dict(first.settings)
    for fragment in fragments:
        out.update(config_of(fragment).settings)
    out.update(settings)
    return ConnectorConfig(first.name, out)


def checked(found: Translation, tmp_path: Path) -> dict[str, dict]:
    """The entries as `jobs check` reads them (entry by entry, nothing broken); their settings as written."""
    import yaml

    path = tmp_path / "from-connect.yaml"
    path.write_text(found.yaml())
    entries = read_each(path)
    assert not entries.broken, "\n".join(str(b.error) for b in entries.broken)
    written = yaml.safe_load(path.read_text())["jobs"]
    assert set(entries.specs) == set(written)
    return written


def refused_settings(config: ConnectorConfig, **choices) -> tuple[set[str], str]:
    with pytest.raises(NotCarried) as refusal:
        translate(config, Choices(database=OURS, **choices))
    return {e.option for e in refusal.value.errors}, str(refusal.value)


def test_every_file_of_the_test_data_has_its_outcome_here():
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "README.md"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_each_configuration_becomes_entries_jobs_check_takes_or_is_refused_naming_its_settings(path, tmp_path):
    outcome, expected = EXPECTED[path]
    if expected == {"CONNECTOR"}:
        with pytest.raises(OptionError, match="holds a connector's offsets"):
            config_of(path)
        return
    if outcome == "refused":
        named, said = refused_settings(config_of(path))
        assert named == expected, said
        assert "password" not in said.lower() or "***" in said  # a URL's password is never shown
        assert "postgrespw" not in said and "mysqlpw" not in said
        return
    found = translate(config_of(path), Choices(database=OURS))
    assert checked(found, tmp_path) == expected
    assert "postgrespw" not in found.yaml() and "pgpassword" not in found.yaml()


def test_the_table_the_connector_wrote_gives_the_columns_their_types_and_the_key(tmp_path):
    """Debezium's own example names no key field: the table's primary key is the key, its columns the entry's."""
    orders = ExistingTable("orders", (
        TableColumn("id", "integer", True), TableColumn("customer", "text", False),
        TableColumn("amount", "numeric(10,2)", True), TableColumn("placed_at", "timestamp with time zone", False),
        TableColumn("note", "character varying", False), TableColumn("details", "jsonb", False)), ("id",))
    read_tables: list[str] = []

    def tables(name: str) -> ExistingTable | None:
        read_tables.append(name)
        return orders if name == "orders" else None

    found = translate(config_of("debezium_jdbc_sink/jdbc_connector.json"),
                      Choices(database=OURS, columns="table"), tables)
    assert read_tables == ["orders"]
    assert checked(found, tmp_path)["jdbc-connector"] == {
        "topic": "orders", "format": "debezium",
        "columns": {"id": {"type": "int"}, "customer": {"type": "string"},
                    "amount": {"type": "decimal(10,2)", "required": True}, "placed_at": {"type": "timestamp"},
                    "note": {"type": "string"}, "details": {"type": "json"}},
        "table": "orders", "key": ["id"], "mode": "replace", "start": "group:connect-jdbc-connector",
        "postgres_conn_id": "postgres_db"}
    assert any("the key is table orders's primary key (id)" in n for n in found.notes)

    connect_made = ExistingTable("orders", (TableColumn("id", "integer", True),
                                            TableColumn("placed_at", "timestamp without time zone", False),
                                            TableColumn("qty", "smallint", False)), ("id",))
    named, said = refused_settings(config_of("debezium_jdbc_sink/jdbc_connector.json"), columns="table")
    assert named == {"--columns-from-table"} and "'orders'" in said, "no such table in the database read"
    with pytest.raises(NotCarried) as refusal:
        translate(config_of("debezium_jdbc_sink/jdbc_connector_2_7.json"), Choices(database=OURS, columns="table"),
                  lambda name: connect_made)
    said = str(refusal.value)
    assert [e.value for e in refusal.value.errors] == ["orders.placed_at timestamp without time zone",
                                                       "orders.qty smallint"], said
    assert ('ALTER TABLE "orders" ALTER COLUMN "placed_at" TYPE timestamptz USING "placed_at" AT TIME ZONE '
            "'UTC'") in said and 'ALTER COLUMN "qty" TYPE integer' in said


def test_fragments_the_docs_show_alone_are_carried_inside_a_configuration(tmp_path):
    dlq = translate(merged("debezium_jdbc_sink/unwrap_smt.json", "debezium_jdbc_sink/dead_letter_queue.json"),
                    Choices(database=OURS))
    checked(dlq, tmp_path)
    assert any("errors.tolerance=all" in n and "the topic dlq-topic is not written" in n for n in dlq.notes)
    retries = translate(merged("debezium_jdbc_sink/unwrap_smt.json", "kafka_connect/error_handling.properties"),
                        Choices(database=OURS))
    assert any(n.startswith("errors.retry.timeout:") for n in retries.notes)
    assert any("the topic my-connector-errors is not written" in n for n in retries.notes)
    fail_fast = translate(merged("debezium_jdbc_sink/unwrap_smt.json",
                                 "kafka_connect/error_handling_defaults.properties"), Choices(database=OURS))
    assert any(n.startswith("errors.tolerance=none stops Connect's task") for n in fail_fast.notes)

    def table(config: ConnectorConfig) -> str:
        found = translate(config, Choices(database=OURS))
        return checked(found, tmp_path)["jdbc-sink"]["table"]

    record_key = "confluent_jdbc_sink/unwrap_smt_record_key.json"
    assert table(merged(record_key, "transforms/regexrouter_drop_prefix.json", topics="soe-Order",
                        transforms="unwrap,dropPrefix")) == "Order", "Confluent's sink quotes: the case stays"
    assert table(merged(record_key, "transforms/regexrouter_debezium_topic_to_table.json",
                        topics="dbserver1.inventory.customers", transforms="unwrap,route")) == "customers"
    debezium = "debezium_jdbc_sink/unwrap_smt.json"
    assert table(merged(debezium, topics="dbserver1.inventory.Customers")) == "dbserver1_inventory_customers", \
        "Debezium's default naming: dots become _, and its unquoted name is folded to lower case"
    assert table(merged(debezium, "debezium_jdbc_sink/passthrough_collection_naming.json",
                        topics="inventory.customers")) == "inventory.customers"
    named, said = refused_settings(merged(record_key, "transforms/extract_new_record_state.properties",
                                          transforms="unwrap"))
    assert named == {"transforms.unwrap.delete.tombstone.handling.mode", "transforms.unwrap.add.fields"}, said


def test_every_setting_that_cannot_be_carried_is_named_at_once_with_its_value_and_fix():
    config = merged("confluent_jdbc_sink/unwrap_smt_record_key.json", **{
        "connection.url": "jdbc:postgresql://db:5432/shop?password=hunter2", "insert.mode": "update",
        "db.timezone": "Europe/Paris", "transforms": "unwrap,mask", "transforms.mask.type":
        "org.apache.kafka.connect.transforms.MaskField$Value", "transforms.mask.fields": "card",
        "consumer.override.auto.offset.reset": "latest", "value.converter": "io.confluent.connect.protobuf."
        "ProtobufConverter", "errors.tolerance": "some", "bogus.setting": "x"})
    named, said = refused_settings(config)
    assert named == {"insert.mode", "db.timezone", "transforms.mask.type", "consumer.override.auto.offset.reset",
                     "value.converter", "errors.tolerance", "bogus.setting"}, said
    assert "hunter2" not in said
    assert "- insert.mode='update': only updates rows that exist" in said and "use upsert (mode replace)" in said
    assert "- db.timezone='Europe/Paris'" in said and "use UTC" in said


def test_deletes_a_connector_keeps_are_refused_for_an_entry_of_change_events():
    """Debezium's sink keeps deleted rows by default (delete.enabled=false), and a format: debezium entry applies
    every delete; streamfill has no setting to keep them."""
    named, said = refused_settings(merged("debezium_jdbc_sink/unwrap_smt.json", **{"delete.enabled": "false"}))
    assert named == {"delete.enabled"} and "streamfill has no setting to keep them" in said
    without = dict(config_of("debezium_jdbc_sink/unwrap_smt.json").settings)
    del without["delete.enabled"]
    named, said = refused_settings(ConnectorConfig("jdbc-sink", without))
    assert named == {"delete.enabled"} and "delete.enabled='false (default)'" in said
    dropped = merged("confluent_jdbc_sink/unwrap_smt_record_key.json",
                     **{"transforms.unwrap.delete.tombstone.handling.mode": "drop"})
    dropped_settings = dict(dropped.settings)
    del dropped_settings["transforms.unwrap.drop.tombstones"]
    named, _ = refused_settings(ConnectorConfig("jdbc-sink", dropped_settings))
    assert named == {"transforms.unwrap.delete.tombstone.handling.mode"}


def test_a_flat_topic_insert_is_append_new_with_the_difference_said(tmp_path):
    base = {"connector.class": CONFLUENT, "topics": "payments", "connection.url":
            "jdbc:postgresql://localhost:5432/streamfill?user=app", "pk.mode": "record_value",
            "pk.fields": "payment_id", "value.converter": "org.apache.kafka.connect.json.JsonConverter"}
    found = translate(ConnectorConfig("pay-sink", base), Choices(database=OURS))
    entry = checked(found, tmp_path)["pay-sink"]
    assert entry == {"topic": "payments", "format": "json",
                     "columns": {"payment_id": {"type": "string", "field": "payload.payment_id"}},
                     "table": "payments", "key": ["payment_id"], "mode": "append-new",
                     "start": "group:connect-pay-sink"}, "JsonConverter with schemas: the fields are under payload"
    assert any(n.startswith("insert.mode=insert: Connect fails a record whose key is already in the table")
               for n in found.notes)
    assert "# columns: only the key's, typed string" in found.yaml()
    upsert = translate(ConnectorConfig("pay-sink", {
        **base, "insert.mode": "upsert", "delete.enabled": "true", "pk.mode": "record_key",
        "value.converter.schemas.enable": "false", "consumer.override.group.id": "payments-to-pg"}),
        Choices(database=OURS))
    entry = checked(upsert, tmp_path)["pay-sink"]
    assert (entry["mode"], entry["deletes"], entry["columns"], entry["start"]) == (
        "replace", "tombstone", {"payment_id": {"type": "string"}}, "group:payments-to-pg")
    assert upsert.group == "payments-to-pg"


def test_several_topics_each_named_in_the_table_become_an_entry_each(tmp_path):
    found = translate(merged("confluent_jdbc_sink/unwrap_smt_record_key.json", topics="customers, orders"),
                      Choices(database=OURS, job="shop"))
    entries = checked(found, tmp_path)
    assert {name: (e["topic"], e["table"], e["start"]) for name, e in entries.items()} == {
        "shop.customers": ("customers", "customers", "group:connect-jdbc-sink"),
        "shop.orders": ("orders", "orders", "group:connect-jdbc-sink")}


def test_the_flat_form_needs_the_connectors_name_and_a_properties_file_reads_as_java_reads_it():
    flat = read('{"connector.class": "%s", "topics": "t"}' % CONFLUENT, "sink.json")
    assert flat.name is None and flat.form == "PUT /connectors/NAME/config"
    named, said = refused_settings(flat)
    assert "name" in named and "give --name NAME" in said
    assert properties("a=1\nb : two\\\n   words\n# c=3\n! d=4\ne\\=f=x\\u0041\n") == {
        "a": "1", "b": "twowords", "e=f": "xA"}


def test_from_connect_writes_entries_jobs_check_accepts_and_refuses_with_the_settings_named(tmp_path, monkeypatch):
    """The issue's Done-when: a JDBC sink configuration and a Debezium JDBC sink configuration of the docs become
    entries that `jobs check` accepts."""
    from streamfill.cli.commands.jobs import app

    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    for name in ("confluent_jdbc_sink/unwrap_smt_record_key.json", "debezium_jdbc_sink/unwrap_smt.json"):
        out = tmp_path / f"{Path(name).stem}.yaml"
        done = runner.invoke(app, ["from-connect", str(DATA / name), "--output", str(out)])
        assert done.exit_code == 0, done.output
        assert "starting at consumer group connect-jdbc-sink's offsets" in done.output
        assert f"check it: streamfill jobs check {out}" in done.output
        checked_run = runner.invoke(app, ["check", str(out)])
        assert checked_run.exit_code == 0, checked_run.output
        assert "1 job(s) valid" in checked_run.output
        assert "starts at: consumer group connect-jdbc-sink's committed offsets" in checked_run.output
    printed = runner.invoke(app, ["from-connect", str(DATA / "debezium_jdbc_sink/unwrap_smt.json")])
    assert printed.exit_code == 0 and printed.output.startswith("# from Kafka Connect connector jdbc-sink")
    refused = runner.invoke(app, ["from-connect", str(DATA / "debezium_jdbc_sink/cqrs_mysql_sink.json")])
    assert refused.exit_code != 0
    assert "connector mysql-sink: 2 setting(s) streamfill cannot carry" in refused.output
    assert "- connection.url='jdbc:mysql://mysql:3306/polls'" in refused.output
    assert "- collection.name.format='${source.table}'" in refused.output


def test_a_connector_name_no_job_takes_needs_job_and_registry_columns_need_avro():
    spaced = ConnectorConfig("orders sink", dict(config_of("debezium_jdbc_sink/unwrap_smt.json").settings))
    named, said = refused_settings(spaced)
    assert named == {"name"} and "give the job a name with --job NAME" in said
    found = translate(spaced, Choices(database=OURS, job="orders-sink"))
    assert [e.job for e in found.entries] == ["orders-sink"] and found.group == "connect-orders sink", \
        "the job is renamed; the group stays the connector's"
    named, said = refused_settings(config_of("debezium_jdbc_sink/unwrap_smt.json"), columns="registry")
    assert named == {"value.converter"} and "--columns-from-registry has no subject to read" in said

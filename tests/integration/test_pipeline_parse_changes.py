"""The parse of entries for tables that follow their topics (issue 46), over real Spark: tombstones as deletes,
Debezium's change events (JSON with and without Kafka Connect's wrapper, and Avro through the stack's schema
registry), and one topic routed into several tables. Each test builds Kafka-shaped rows without a broker (the
typed read's test goes through the broker) and asserts what the sink is given: the rows, `_delete`, `_route`,
`source_position` and the dead letters' reasons a user reads."""

from __future__ import annotations

import io
import json
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION
from streamfill.spark_jobs.pipelines import PipelineSpec, registry
from streamfill.spark_jobs.pipelines.compile import parse
from streamfill.spark_jobs.pipelines.typed_in_read import reader_options
from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration

DATA = Path(__file__).parents[1] / "data"  # events and keys as the software that writes them documents them

KAFKA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"


def _bytes(x) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    return (x if isinstance(x, str) else json.dumps(x)).encode()


def parsed(spark, spec: PipelineSpec, records: list[tuple]) -> list[dict]:
    """The parse of (key, value) records at offsets 0, 1, ...: each row as a dict, in offset order."""
    rows = [(_bytes(k), _bytes(v), "t", 0, i, datetime(2026, 1, 1), 0) for i, (k, v) in enumerate(records)]
    out = parse(spark.createDataFrame(rows, KAFKA), spec)
    return [r.asDict() for r in out.orderBy("offset").collect()]


def pick(rows: list[dict], *columns: str) -> list[tuple]:
    return [tuple(r[c] for c in columns) for r in rows]


CUSTOMERS = PipelineSpec(name="customers", topic="customers", table="customers", key=["id"], mode="replace",
                         deletes="tombstone", columns={"id": {"type": "bigint"},
                                                      "name": {"type": "string", "required": True, "max_length": 5}})


def test_a_tombstone_deletes_the_row_its_kafka_key_names_and_an_unreadable_key_is_a_dead_letter(spark):
    rows = parsed(spark, CUSTOMERS, [
        ({"id": 1}, {"id": 1, "name": "ann"}),
        ({"id": 1}, None),  # a JSON object key: the key column reads its field
        ("2", None),  # one key column, a key that is no JSON object: the key's text
        (None, None),
        ({"x": 1}, None),
        ("abc", None),
        (b"\xff\xfe", None),
        ({"id": 3}, {"id": 3}),  # a value is checked by every rule, as ever
        ({"id": 4}, {"id": 4, "name": "toolong"}),
    ])
    assert list(rows[0]) == ["topic", "partition", "offset", "kafka_timestamp", "id", "name", "_error", "_raw",
                             DELETE_COLUMN]
    assert pick(rows, "id", "name", DELETE_COLUMN, "_error") == [
        (1, "ann", False, None),
        (1, None, True, None),
        (2, None, True, None),
        (None, None, False, "tombstone has no key"),
        (None, None, False, "tombstone key has no field id"),
        (None, None, False, "tombstone key: id is not a bigint: abc"),
        (None, None, False, "tombstone key is not valid UTF-8"),
        (None, None, False, "missing field name (required)"),
        (None, None, False, "name longer than max_length 5: 7 characters"),
    ]
    assert [r["_raw"] for r in rows[3:7]] == [None] * 4  # a tombstone's dead letter has no value to keep


def test_a_tombstone_key_of_several_columns_or_at_a_path_is_read_like_the_value(spark):
    regional = PipelineSpec(name="r", topic="r", table="r", key=["region", "id"], mode="replace", deletes="tombstone",
                            columns={"region": {"type": "string"}, "id": {"type": "bigint"}})
    assert pick(parsed(spark, regional, [({"region": "eu", "id": 7}, None), ("7", None),
                                         ({"region": "eu", "id": "x"}, None)]),
                "region", "id", DELETE_COLUMN, "_error") == [
        ("eu", 7, True, None),
        (None, None, False, "tombstone key is not a JSON object, as a key of 2 columns needs: 7"),
        (None, None, False, "tombstone key: id is not a bigint: x")]
    nested = PipelineSpec(name="n", topic="n", table="n", key=["topic", "cust"], mode="replace", deletes="tombstone",
                          columns={"cust": {"type": "bigint", "field": "customer.id"}, "note": {"type": "string"}})
    assert pick(parsed(spark, nested, [({"customer": {"id": 5}}, None), ("6", None),
                                       ({"customer": {"id": 8}}, {"customer": {"id": 8}, "note": "n"})]),
                "topic", "cust", "note", DELETE_COLUMN, "_error") == [
        ("t", 5, None, True, None), ("t", 6, None, True, None), ("t", 8, "n", False, None)]


def test_tombstones_through_the_typed_read_give_the_rows_of_sparks_own_parse(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=1)
    produce(bootstrap, topic_name, [{"key": _bytes(k), "value": _bytes(v)} for k, v in [
        ({"id": 1}, {"id": 1, "name": "ann"}), ({"id": 1}, None), ("2", None), (None, None),
        ({"id": 3}, {"id": "x", "name": "bo"}), ({"id": 4}, {"id": 4, "name": "cy"})]])
    spec = CUSTOMERS.model_copy(update={"topic": topic_name})
    assert reader_options(spec)  # the read types the values it can; tombstones are Spark's

    def read(options: dict) -> list[tuple]:
        kafka = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic_name).options(**options).load())
        return [tuple(r) for r in parse(kafka, spec).drop("kafka_timestamp").orderBy("offset").collect()]

    typed = read(reader_options(spec))
    assert typed == read({})
    assert [row[3:] for row in typed] == [
        (1, "ann", None, None, False), (1, None, None, None, True), (2, None, None, None, True),
        (None, None, "tombstone has no key", None, False),
        (None, None, "id is not a bigint: x", b'{"id": "x", "name": "bo"}', False), (4, "cy", None, None, False)]


INVENTORY = PipelineSpec(name="inventory", topic="pg.public.inventory", table="inventory", format="debezium",
                         key=["id"], columns={"id": {"type": "bigint"}, "sku": {"type": "string", "required": True},
                                              "count": {"type": "int", "min": 0}})


def event(op: str, before: dict | None, after: dict | None, lsn: object = 100, **source) -> dict:
    return {"before": before, "after": after, "op": op, "source": {"lsn": lsn, **source}, "ts_ms": 1767225600000}


def wrapped(payload: dict | None) -> dict:
    """Kafka Connect's JsonConverter with schemas.enable: the schema beside the payload."""
    return {"schema": {"type": "struct", "name": "pg.public.inventory.Envelope"}, "payload": payload}


def test_a_debezium_event_that_cannot_be_applied_is_a_dead_letter_with_its_reason(spark):
    rows = parsed(spark, INVENTORY, [
        (None, event("t", None, None)),
        (None, {"before": None, "after": {"id": 1, "sku": "a"}}),
        (None, "not json"),
        (None, event("u", {"id": 1}, None)),
        (None, event("d", None, None)),
        (None, event("d", {"sku": "a"}, None)),
        (None, event("d", {"id": "one"}, None)),
        (None, event("c", None, {"id": 1, "sku": "a"}, 1.5)),
        (None, event("c", None, {"id": 1, "sku": "a"}, "0x1F")),
        (None, {k: v for k, v in event("c", None, {"id": 1, "sku": "a"}).items() if k != "source"}),
        (None, event("c", None, {"id": 1, "sku": "a", "count": -2})),  # after is checked by every rule
        (None, event("c", None, {"id": 1})),
        (None, wrapped(None)),
    ])
    assert pick(rows, "_error") == [
        ("unknown Debezium op t; streamfill applies c, r, u, d",),
        ("not a Debezium change event: it has no op",),
        ("invalid JSON",),
        ("op u has no after",),
        ("op d has no before: the row to delete is unknown",),
        ("before of op d has no field id",),
        ("before of op d: id is not a bigint: one",),
        ("source.lsn is not a position (a whole number of at most 38 digits): 1.5",),
        ("source.lsn is not a position (a whole number of at most 38 digits): 0x1F",),
        ("the change event has no source.lsn; set position: to the field that orders the connector's changes, or "
         "position: none",),
        ("count below min 0: -2",),
        ("missing field sku (required)",),
        ("not a Debezium change event: it has no op",),
    ]
    assert all(r[DELETE_COLUMN] is False and r[SOURCE_POSITION] is None and r["_raw"] for r in rows)


def test_a_debezium_entry_with_tombstones_deletes_by_the_kafka_key_and_reads_another_position(spark):
    spec = INVENTORY.model_copy(update={"deletes": "tombstone", "position": "source.scn"})
    rows = parsed(spark, spec, [
        ({"id": 1}, event("c", None, {"id": 1, "sku": "a"}, scn="77")),
        (wrapped({"id": 1}), None),  # the key wrapped like the value
        ({"id": 1}, None),
        ("1", None),
        (None, None),
        ({"id": 2}, event("c", None, {"id": 2, "sku": "b"})),
    ])
    assert pick(rows, SOURCE_POSITION, "id", "sku", DELETE_COLUMN, "_error") == [
        (Decimal(77), 1, "a", False, None),
        (None, 1, None, True, None),
        (None, 1, None, True, None),
        (None, 1, None, True, None),
        (None, None, None, False, "tombstone has no key"),
        (None, None, None, False, "the change event has no source.scn; set position: to the field that orders the "
                                  "connector's changes, or position: none"),
    ]
    unordered = INVENTORY.model_copy(update={"position": "none"})
    assert pick(parsed(spark, unordered, [(None, event("c", None, {"id": 3, "sku": "c"}, "bad"))]),
                SOURCE_POSITION, "id", "_error") == [(None, 3, None)]


EVENTS = PipelineSpec.model_validate({
    "name": "events", "topic": "events", "key": ["event_id"], "mode": "replace",
    "columns": {"event_id": {"type": "string", "required": True}, "amount": {"type": "decimal(12,2)", "min": 0},
                "note": {"type": "string"}},
    "derived": {"cents": "amount * 100"},
    "route": {"field": "event_type", "tables": {
        "order": "orders",
        "refund": {"table": "sales.refunds", "key": ["refund_id"], "mode": "append-new",
                   "columns": {"refund_id": {"type": "bigint", "required": True},
                               "amount": {"type": "decimal(12,2)", "field": "refund.amount", "max": 100}},
                   "derived": {"negative": "-amount"}},
        "7": "orders"}}})


def test_unmatched_records_go_to_the_table_the_route_names(spark):
    spec = EVENTS.model_copy(update={"route": EVENTS.route.model_copy(update={"unmatched": "other_events"})})
    assert [t.table for t in spec.route_tables()][-1] == "other_events"
    rows = parsed(spark, spec, [(None, {"event_type": "shipment", "event_id": "e5", "note": "x"}),
                                (None, {"event_id": "e6", "amount": -3})])
    assert pick(rows, ROUTE_COLUMN, "event_id", "note", "refund_id", "cents", "_error") == [
        ("other_events", "e5", "x", None, None, None),
        ("other_events", None, None, None, None, "amount below min 0: -3")]


# as Confluent's AvroConverter writes Debezium's schemas: Connect's Decimal a decimal logical type, Debezium's
# semantic types a `connect.name` beside the Avro type
AVRO_PRICE = {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1, "logicalType": "decimal",
              "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
              "connect.name": "org.apache.kafka.connect.data.Decimal"}
AVRO_CREATED = {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}
AVRO_ROW = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "int"},
                                                          {"name": "sku", "type": ["null", "string"], "default": None},
                                                          {"name": "price", "type": ["null", AVRO_PRICE], "default": None},
                                                          {"name": "created", "type": ["null", AVRO_CREATED],
                                                           "default": None}]}
AVRO_EVENT = {"type": "record", "name": "Envelope", "namespace": "pg.public.stock", "fields": [
    {"name": "before", "type": ["null", AVRO_ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
        {"name": "lsn", "type": ["null", "long"], "default": None}]}},
    {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
AVRO_KEY = {"type": "record", "name": "Key", "namespace": "pg.public.stock", "fields": [{"name": "id", "type": "int"}]}


def wire(schema_id: int, schema: dict, datum: dict) -> bytes:
    """Confluent's wire format: a zero byte, the schema id (4 bytes, big-endian), the Avro datum."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


@pytest.mark.xdist_group("schema_registry")
def test_avro_debezium_events_through_the_registry_take_their_columns_from_after(spark, stack_settings, topic_name):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient(stack_settings.schema_registry())
    value_id = client.register_schema(f"{topic_name}-value", Schema(json.dumps(AVRO_EVENT), "AVRO"))
    key_id = client.register_schema(f"{topic_name}-key", Schema(json.dumps(AVRO_KEY), "AVRO"))
    entry = PipelineSpec(name=topic_name, topic=topic_name, table=topic_name, format="debezium", schema_registry={},
                         key=["id"], deletes="tombstone")
    spec = registry.resolved(entry, stack_settings.schema_registry())
    assert {n: (str(c.column_type), c.required) for n, c in spec.columns.items()} == {
        "id": ("int", True), "sku": ("string", False), "price": ("decimal(10,2)", False),
        "created": ("timestamp", False)}

    def change(op: str, before: dict | None, after: dict | None, lsn: int) -> bytes:
        return wire(value_id, AVRO_EVENT, {"before": before, "after": after, "source": {"lsn": lsn}, "op": op,
                                           "ts_ms": None})

    created = {"price": Decimal("30.50"), "created": 1529507596945104}
    rows = parsed(spark, spec, [
        (wire(key_id, AVRO_KEY, {"id": 1}), change("r", None, {"id": 1, "sku": "a", **created}, 5)),
        (wire(key_id, AVRO_KEY, {"id": 1}), change("u", {"id": 1, "sku": "a"}, {"id": 1, "sku": None}, 9)),
        (wire(key_id, AVRO_KEY, {"id": 1}), change("d", {"id": 1, "sku": None}, None, 12)),
        (wire(key_id, AVRO_KEY, {"id": 1}), None),  # the key decoded by its schema id
        (None, b"not avro"),
    ])
    assert pick(rows, SOURCE_POSITION, "id", "sku", DELETE_COLUMN) == [
        (Decimal(5), 1, "a", False), (Decimal(9), 1, None, False), (Decimal(12), 1, None, True),
        (None, 1, None, True), (None, None, None, False)]
    assert (rows[0]["price"], rows[0]["created"]) == (Decimal("30.50"), datetime(2018, 6, 20, 15, 13, 16, 945104))
    assert (rows[4]["_error"], rows[4]["_raw"]) == (
        "value is not in Confluent's wire format (no zero magic byte and schema id)", b"not avro")

    # keys as Confluent's Avro serializer writes a string and a long (tests/data/keys/keys.json)
    avro_keys = [k for k in json.loads((DATA / "keys" / "keys.json").read_text())["keys"] if "datum_hex" in k]
    tombstones = []
    for n, k in enumerate(avro_keys):
        schema_id = client.register_schema(f"{topic_name}-key{n}", Schema(k["schema"], "AVRO"))
        tombstones.append((b"\0" + schema_id.to_bytes(4, "big") + bytes.fromhex(k["datum_hex"]), None))
    customers = PipelineSpec(name=topic_name, topic=topic_name, table=topic_name, format="avro", schema_registry={},
                             key=["id"], mode="replace", deletes="tombstone",
                             columns={"id": {"type": "string"}, "name": {"type": "string"}})
    assert pick(parsed(spark, customers, tombstones), "id", DELETE_COLUMN, "_error") == [
        (str(k["means"]), True, None) for k in avro_keys]


def documented(connector: str, name: str) -> bytes:
    """A Kafka record's key or value as Debezium's documentation shows it (tests/data/debezium/README.md)."""
    return (DATA / "debezium" / connector / f"{name}.json").read_bytes()


def schemaless(record: bytes) -> bytes:
    """The same record through JsonConverter with schemas.enable=false: the payload alone."""
    return json.dumps(json.loads(record)["payload"]).encode()


ORDERS = {"name": "orders", "topic": "PostgreSQL_server.public.orders", "table": "orders", "format": "debezium",
          "key": ["id"], "deletes": "tombstone",
          "columns": {"id": {"type": "bigint"}, "price": {"type": "decimal(10,2)", "required": True},
                      "created": {"type": "timestamp"}, "shipped": {"type": "date"}, "updated": {"type": "timestamp"}}}


def test_debezium_postgresql_events_land_with_the_source_values_from_their_schema_or_the_entrys_modes(spark):
    """The issue's table: NUMERIC(10,2) 30.50 as "C+o=" (Decimal), TIMESTAMP as MicroTimestamp, DATE as Date,
    TIMESTAMPTZ as ZonedTimestamp, through JsonConverter with schemas and, without them, read by the entry's
    connector settings."""
    key = documented("postgresql", "orders_key")
    events = [documented("postgresql", f"orders_{op}") for op in ("create", "update", "delete")]
    landed = [
        (Decimal(24023128), 7, Decimal("30.50"), datetime(2018, 6, 20, 15, 13, 16, 945104), date(2018, 6, 20),
         datetime(2018, 6, 20, 13, 37, 3), False, None),
        (Decimal(24023200), 7, Decimal("1275.00"), datetime(2018, 6, 20, 15, 13, 16, 945104), date(2018, 6, 20),
         datetime(2018, 6, 21, 8, 0, 0, 500000), False, None),
        (Decimal(24023300), 7, None, None, None, None, True, None),
        (None, 7, None, None, None, None, True, None),  # Debezium's tombstone after the delete
    ]
    columns = (SOURCE_POSITION, "id", "price", "created", "shipped", "updated", DELETE_COLUMN, "_error")
    with_schema = parsed(spark, PipelineSpec.model_validate(ORDERS), [*((key, e) for e in events), (key, None)])
    assert pick(with_schema, *columns) == landed
    settings = {"decimal.handling.mode": "precise", "time.precision.mode": "adaptive",
                "semantic.types": {"created": "MicroTimestamp", "updated": "ZonedTimestamp"}}
    without = PipelineSpec.model_validate({**ORDERS, "debezium": settings})
    rows = parsed(spark, without, [*((schemaless(key), schemaless(e)) for e in events), (schemaless(key), None),
                                   (None, schemaless(events[0]).replace(b'"C+o="', b'"C+o"'))])
    assert pick(rows, *columns)[:4] == landed
    assert rows[4]["_error"] == ("price (org.apache.kafka.connect.data.Decimal, scale 2) cannot be decoded: C+o is "
                                 "not base64"), "a value that does not decode names its column, type and value"


PEOPLE = {"name": "people", "topic": "server1.inventory.customers", "table": "people", "format": "debezium",
          "key": ["id"], "deletes": "tombstone",
          "columns": {"id": {"type": "bigint"}, "first_name": {"type": "string", "required": True},
                      "last_name": {"type": "string"}, "email": {"type": "string"}}}


def test_debezium_events_of_each_documented_connector_land_with_and_without_their_schema(spark):
    """PostgreSQL, MySQL and SQL Server in one entry (each event's position by its connector), Oracle's upper-case
    columns, MongoDB's documents as Extended JSON text and its delete that only the Kafka key names."""
    def each(connector: str, *names: str, key: bytes | None = None) -> list[tuple]:
        wrapped = [(key or documented(connector, "key"), documented(connector, n)) for n in names]
        return [*wrapped, *((schemaless(k), schemaless(v)) for k, v in wrapped)]

    records = [*each("postgresql", "create", "update", "delete"), *each("mysql", "create", "update", "delete"),
               *each("sqlserver", "create", "update", "delete")]
    tombstones = [(documented(c, "key"), None) for c in ("postgresql", "mysql", "sqlserver")]
    rows = parsed(spark, PipelineSpec.model_validate(PEOPLE), records + tombstones)
    assert [r["_error"] for r in rows] == [None] * len(rows)

    def lsn(text: str) -> Decimal:  # SQL Server's commit_lsn, read as the number its hex parts write
        return Decimal(int(text.replace(":", ""), 16))

    anne = ("Anne", "Kretchmar", "annek@noanswer.org")
    postgresql = [(Decimal(24023128), 1, *anne, False), (Decimal(24023128), 1, "Anne Marie", *anne[1:], False),
                  (Decimal(46523128), 1, None, None, None, True)]
    mysql = [(None, 1004, *anne, False), (None, 1004, "Anne Marie", *anne[1:], False),
             (None, 1004, None, None, None, True)]  # no position of one number: Kafka's order
    sqlserver = [(lsn("00000027:00000758:0005"), 1005, "john", "doe", "john.doe@example.org", False),
                 (lsn("00000027:00000ac0:0007"), 1005, "john", "doe", "noreply@example.org", False),
                 (lsn("00000027:00000db0:0007"), 1005, None, None, None, True)]
    tombstoned = [(None, 1, None, None, None, True), (None, 1001, None, None, None, True),
                  (None, 1004, None, None, None, True)]  # each documented key (the docs' ids differ)
    assert pick(rows, SOURCE_POSITION, "id", "first_name", "last_name", "email", DELETE_COLUMN) == [
        *postgresql * 2, *mysql * 2, *sqlserver * 2, *tombstoned]

    oracle = PipelineSpec.model_validate({
        **PEOPLE, "position": "source.scn", "columns": {
            "id": {"type": "bigint", "field": "ID"}, "first_name": {"type": "string", "field": "FIRST_NAME"},
            "last_name": {"type": "string", "field": "LAST_NAME"}, "email": {"type": "string", "field": "EMAIL"}}})
    rows = parsed(spark, oracle, each("oracle", "create", "update", "delete"))
    assert pick(rows, SOURCE_POSITION, "id", "email", DELETE_COLUMN, "_error")[:3] == [
        (Decimal(2122185), 1004, "annek@noanswer.org", False, None),
        (Decimal(2125544), 1004, "anne@example.com", False, None), (Decimal(2122184), 1004, None, True, None)]
    assert [r["_error"] for r in rows] == [None] * 6

    mongo = PipelineSpec.model_validate({**PEOPLE, "columns": {**PEOPLE["columns"], "id": {"type": "bigint",
                                                                                            "field": "_id"}}})
    without_pre_image = json.loads(documented("mongodb", "delete"))
    del without_pre_image["payload"]["before"]  # capture.mode change_streams: the delete names its key only
    key = documented("mongodb", "key")
    rows = parsed(spark, mongo, [*each("mongodb", "create", "update", "delete"),
                                 (key, json.dumps(without_pre_image).encode()), (key, None)])
    assert pick(rows, SOURCE_POSITION, "id", "first_name", "email", DELETE_COLUMN, "_error") == [
        (None, 1004, "Anne", "annek@noanswer.org", False, None),
        (None, 1004, "Anne Marie", "annek@noanswer.org", False, None), (None, 1004, None, None, True, None),
    ] * 2 + [(None, 1004, None, None, True, None)] * 2


def test_a_tombstone_key_is_read_as_its_serializer_wrote_it(spark):
    """A JSON string key is its string, a JSON number its number, JsonConverter's envelope its payload, plain text
    itself; a key that names no row is a dead letter saying why (tests/data/keys/keys.json)."""
    keys = json.loads((DATA / "keys" / "keys.json").read_text())["keys"]
    texts = [k for k in keys if "key" in k]
    spec = PipelineSpec(name="c", topic="c", table="c", key=["id"], mode="replace", deletes="tombstone",
                        columns={"id": {"type": "string"}, "name": {"type": "string"}})
    rows = parsed(spark, spec, [(k["key"], None) for k in texts] + [
        ("1.50", None), ("null", None), ("[1, 2]", None), (b"\0\0\0\0\x05\x04c7", None)])
    assert pick(rows, "id", DELETE_COLUMN, "_error") == [
        *((str(k["means"]["id"] if isinstance(k["means"], dict) else k["means"]), True, None) for k in texts),
        ("1.50", True, None),  # a number's text as written
        (None, False, "tombstone key is JSON null, which names no row"),
        (None, False, "tombstone key is a JSON array, which names no row: [1, 2]"),
        (None, False, "tombstone key is Avro in Confluent's wire format (schema id 5); an entry reads such keys "
                      "with schema_registry"),
    ]


def test_a_position_in_the_row_reads_before_for_a_delete_and_after_for_the_others(spark):
    for path in ("after.version", "before.version"):
        spec = INVENTORY.model_copy(update={"position": path})
        rows = parsed(spark, spec, [(None, event("c", None, {"id": 1, "sku": "a", "version": 3})),
                                    (None, event("u", {"id": 1, "version": 3}, {"id": 1, "sku": "b", "version": 4})),
                                    (None, event("d", {"id": 1, "version": 5}, None))])
        assert pick(rows, SOURCE_POSITION, "id", DELETE_COLUMN, "_error") == [
            (Decimal(3), 1, False, None), (Decimal(4), 1, False, None), (Decimal(5), 1, True, None)], path


def test_a_delete_keeps_the_version_column_of_its_row_image(spark):
    """`version: <column>` orders a key's versions between partitions: a `d` event's `before` gives its own."""
    spec = PipelineSpec(name="inventory", topic="pg.public.inventory", table="inventory", format="debezium",
                        position="none", version="version", key=["id"],
                        columns={"id": {"type": "bigint"}, "sku": {"type": "string"}, "version": {"type": "bigint"}})
    rows = parsed(spark, spec, [(None, event("c", None, {"id": 1, "sku": "a", "version": 3})),
                                (None, event("d", {"id": 1, "sku": "a", "version": 5}, None))])
    assert pick(rows, "id", "sku", "version", DELETE_COLUMN, "_error") == [(1, "a", 3, False, None),
                                                                          (1, None, 5, True, None)]

"""Debezium's change event, as an entry with `format: debezium` reads it (docs/pipelines.md, "Change data
capture"): `{"before": .., "after": .., "op": "c|r|u|d", "source": {.., "lsn": ..}, "ts_ms": ..}`, alone or
wrapped as `{"schema": .., "payload": {..}}` by Kafka Connect's JsonConverter with schemas enabled, or the same
envelope in Avro. Facts only, no Spark: the parse (spark_jobs.pipelines.envelope) and the registry's columns
(spark_jobs.pipelines.registry) both read them from here."""

from __future__ import annotations

from collections.abc import Mapping

UPSERTS = ("c", "r", "u")  # create, read (a snapshot's row), update: the row becomes `after`
DELETE = "d"  # the row `before` names by its key is deleted
OPS = (*UPSERTS, DELETE)
ROW_AFTER, ROW_BEFORE = "after", "before"
OP = "op"
# Kafka Connect's JsonConverter with schemas.enable wraps each key and value in these two fields
WRAPPER, WRAPPED = "schema", "payload"
DEFAULT_POSITION = "source.lsn"  # the PostgreSQL connector's, and an event's that names no connector
NO_POSITION = "none"  # `position: none`: Kafka's coordinates alone order a key's versions
CONNECTOR = "source.connector"  # the connector that wrote the event: postgresql, mysql, sqlserver, oracle, mongodb
# without `position:`, an event's position by its connector: a number in the source's log. MySQL's binlog file and
# offset and MongoDB's oplog time and ordinal are no one number; Debezium writes each key's events to one partition
# in the source's order, so Kafka's order is theirs
POSITIONS: dict[str, str | None] = {"postgresql": "source.lsn", "oracle": "source.scn",
                                    "sqlserver": "source.commit_lsn", "mysql": None, "mariadb": None,
                                    "mongodb": None}
MONGODB = "mongodb"
MONGODB_ID, MONGODB_KEY_ID = "_id", "id"  # a document's key, and the field of Debezium's Kafka key that holds it
ROW_FIELDS = (OP, ROW_BEFORE, ROW_AFTER)


def default_position(connector: object) -> str | None:
    """The position path of an event whose entry gives no `position:`, by its `source.connector` (None: Kafka's
    order); a connector this table does not name, or none, is read at DEFAULT_POSITION."""
    return POSITIONS.get(connector, DEFAULT_POSITION) if isinstance(connector, str) else DEFAULT_POSITION


def default_positions() -> str:
    """The defaults as the docs and `streamfill jobs check` name them."""
    named = {"postgresql": "PostgreSQL", "oracle": "Oracle", "sqlserver": "SQL Server", "mysql": "MySQL",
             "mariadb": "MariaDB", "mongodb": "MongoDB"}
    by_path: dict[str, list[str]] = {}
    for connector, path in POSITIONS.items():
        by_path.setdefault(path or "Kafka's order", []).append(named[connector])
    return "; ".join(f"{path} ({', '.join(names)})" for path, names in by_path.items())


def after_record(schema: Mapping) -> Mapping:
    """The record schema of an Avro change event's `after` field (a union of null and the row's record, which
    Debezium defines in `before` and names again in `after`): the table's columns are its fields. ValueError
    when the schema is no such envelope."""
    fields = schema.get("fields") if isinstance(schema, Mapping) and schema.get("type") == "record" else None
    after = next((f["type"] for f in fields or () if f.get("name") == ROW_AFTER), None)
    named = _records(schema, schema.get("namespace", "") if isinstance(schema, Mapping) else "")
    records = [named.get(t, t) for t in (after if isinstance(after, list) else [after]) if t != "null"]
    records = [t for t in records if isinstance(t, Mapping) and t.get("type") == "record"]
    if len(records) != 1:
        raise ValueError("the subject's schema is not a Debezium change event (a record with an `after` field of "
                         "a union of null and the row's record), so it gives no columns; declare columns: in the "
                         "entry")
    return records[0]


def _records(schema: object, namespace: str) -> dict[str, Mapping]:
    """Every record the schema defines, by its name and by its full name (namespace.name): Avro names a type
    again by either once it is defined."""
    out: dict[str, Mapping] = {}
    if isinstance(schema, list):
        for t in schema:
            out.update(_records(t, namespace))
    elif isinstance(schema, Mapping) and schema.get("type") == "record":
        name = schema.get("name", "")
        namespace = schema.get("namespace", name.rpartition(".")[0] or namespace)
        short = name.rpartition(".")[2]
        out.update({short: schema, f"{namespace}.{short}" if namespace else short: schema})
        for f in schema.get("fields", ()):
            out.update(_records(f.get("type"), namespace))
    return out

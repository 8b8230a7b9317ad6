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
DEFAULT_POSITION = "source.lsn"  # the PostgreSQL connector's; Oracle's is source.scn
NO_POSITION = "none"  # `position: none`: Kafka's coordinates alone order a key's versions


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

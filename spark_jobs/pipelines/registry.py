"""Avro schemas from a Confluent-compatible schema registry (Confluent's, Apicurio's ccompat API, Karapace):
each value's writer schema by the id in its wire format, cached per process; a subject's latest version as the
reader schema; and an entry's columns from a schema. Pure of Spark: it runs in the read's Python tasks.

An id the registry does not know is the record's fault (a dead letter, `UnknownSchemaId`); a registry that does
not answer, or answers with a server error, is an outage (`RegistryError`): the batch fails and is read again.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping

from streamfill.bounded_cache import BoundedCache
from streamfill.errors import RegistryError
from streamfill.spark_jobs.pipelines.connect_types import column_type_of
from streamfill.spark_jobs.pipelines.debezium import after_record

# clients by their settings; writer schemas by (registry's URL, schema id)
_clients: BoundedCache[Hashable, object] = BoundedCache(8)
_writers: BoundedCache[Hashable, object] = BoundedCache(256)


class UnknownSchemaId(LookupError):
    """The registry answered: no schema has this id."""


def _client(conf: Mapping[str, str]):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return _clients.get(tuple(sorted(conf.items())),
                        lambda: SchemaRegistryClient({"timeout": 10, "max.retries": 2, **conf}))


def _call(conf: Mapping[str, str], what: str, call):
    """call() against the registry; a 404 is UnknownSchemaId, any other failure a RegistryError."""
    from confluent_kafka.schema_registry import SchemaRegistryError

    try:
        return call(_client(conf))
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            raise UnknownSchemaId(f"{what}: {exc.error_message}") from None
        raise RegistryError(f"{what} failed at the schema registry {conf['url']}: HTTP {exc.http_status_code} "
                            f"{exc.error_message}") from None
    except Exception as exc:  # httpx's connection errors and timeouts, OSError
        raise RegistryError(f"{what} failed: the schema registry {conf['url']} does not answer ({type(exc).__name__}"
                            f": {exc}). Nothing of this batch is committed; it is read again once the registry "
                            "answers") from None


def writer_schema(conf: Mapping[str, str], schema_id: int):
    """The parsed writer schema of `schema_id` (fastavro), fetched once per process (which keeps the newest)."""
    import fastavro

    def fetch():
        schema = _call(conf, f"looking up schema id {schema_id}", lambda c: c.get_schema(schema_id))
        if (schema.schema_type or "AVRO") != "AVRO":
            raise UnknownSchemaId(f"schema id {schema_id} is a {schema.schema_type} schema, not Avro")
        return fastavro.parse_schema(json.loads(schema.schema_str))

    return _writers.get((conf["url"], schema_id), fetch)


def latest_schema(conf: Mapping[str, str], subject: str) -> tuple[int, int, dict]:
    """(schema id, version, schema) of the subject's latest version; a missing subject is an OptionError."""
    from streamfill.errors import OptionError

    try:
        found = _call(conf, f"looking up the latest version of subject {subject!r}",
                      lambda c: c.get_latest_version(subject))
    except UnknownSchemaId:
        raise OptionError("schema_registry.subject", subject, f"is not a subject of the schema registry at "
                          f"{conf['url']}", "Register the topic's schema first, or name the subject its producers "
                          "use (Confluent's default: <topic>-value)") from None
    return found.schema_id, found.version, json.loads(found.schema.schema_str)


def client_settings(subject_url: str | None = None) -> dict[str, str]:
    """The registry's client settings: STREAMFILL_SCHEMA_REGISTRY_* (a launched job's come from the Airflow
    connection), the entry's `url` first when it gives one."""
    from streamfill.settings import get_settings  # imported here: the read's tasks import this module

    conf = get_settings().schema_registry()
    return {**conf, "url": subject_url} if subject_url else conf


def resolved(spec, conf: Mapping[str, str] | None = None):
    """`spec` ready for a launch: an entry naming a subject instead of columns gets the columns of the subject's
    latest version (a Debezium entry: of its `after` record), and that schema as its reader schema. `conf`: the
    registry's client settings (default: client_settings())."""
    from streamfill.errors import OptionError

    if not spec.columns_from_registry:
        return spec
    conf = {**conf, "url": spec.schema_registry.url or conf["url"]} if conf else client_settings(
        spec.schema_registry.url)
    _, version, schema = latest_schema(conf, spec.registry_subject)
    try:
        # a Debezium change event's row is its `after` field; the whole event stays the values' reader schema
        columns = columns_of(after_record(schema), semantic=True) if spec.format == "debezium" else \
            columns_of(schema)
        return spec.with_columns(columns, schema)
    except ValueError as exc:
        raise OptionError("schema_registry.subject", spec.registry_subject, f"(version {version}) does not give "
                          f"entry {spec.name!r} its columns: {exc}", "Declare columns: in the entry") from None


def columns_of(schema: Mapping, semantic: bool = False) -> dict[str, dict]:
    """An entry's `columns:` for an Avro record schema: each field a column of the matching type, required
    unless the field may be null. `semantic`: a field's Kafka Connect semantic type (`connect.name`, which a
    Debezium entry reads: change_events) decides its column's type (MicroTimestamp a timestamp, not a bigint)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise ValueError("the subject's schema is not an Avro record, so it gives no columns; declare columns: "
                         "in the entry")
    columns = {}
    for field in schema["fields"]:
        kind, nullable = _column_type(field["type"], semantic)
        columns[field["name"]] = {"type": kind, "required": not nullable and "default" not in field}
    return columns


_PRIMITIVES = {"string": "string", "int": "int", "long": "bigint", "float": "double", "double": "double",
               "boolean": "boolean", "bytes": "string", "fixed": "string", "enum": "string"}
_LOGICAL = {"date": "date", "timestamp-millis": "timestamp", "timestamp-micros": "timestamp",
            "local-timestamp-millis": "timestamp", "local-timestamp-micros": "timestamp", "uuid": "string"}


def _column_type(avro: object, semantic: bool = False) -> tuple[str, bool]:
    """(column type, may be null) of an Avro type."""
    if isinstance(avro, list):
        others = [t for t in avro if t != "null"]
        if len(others) == 1:
            return _column_type(others[0], semantic)[0], len(others) < len(avro)
        return "json", "null" in avro
    if isinstance(avro, str):
        return _PRIMITIVES.get(avro, "json"), False
    if semantic and column_type_of(avro.get("connect.name")) is not None:
        return column_type_of(avro.get("connect.name")), False
    logical = avro.get("logicalType")
    if logical == "decimal":
        return f"decimal({avro['precision']},{avro.get('scale', 0)})", False
    if logical in _LOGICAL:
        return _LOGICAL[logical], False
    kind = avro.get("type")
    if kind == "array":
        return f"array<{_column_type(avro['items'], semantic)[0]}>", False
    if kind == "record":
        return "struct<" + ",".join(f"{f['name']}:{_column_type(f['type'], semantic)[0]}"
                                    for f in avro["fields"]) + ">", False
    return _PRIMITIVES.get(kind, "json"), False

"""The rules between a pipeline entry's fields, which no single field's check sees: what an entry implies
without saying it, and which formats, modes, deletes, routes and keys go together."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamfill.changes import NO_DELETES, SOURCE_POSITION, TOMBSTONE
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.spark_jobs.pipelines import routes
from streamfill.spark_jobs.pipelines.columns import (
    COLUMN_NAME,
    COORDINATES,
    KAFKA_TIMESTAMP,
    RAW_COLUMNS,
    RESERVED,
    check_key,
)
from streamfill.spark_jobs.pipelines.connect_types import FITS
from streamfill.spark_jobs.pipelines.debezium_settings import OPEN_UNIT_MODES, TIMESTAMP_TYPES
from streamfill.spark_jobs.pipelines.types import ORDERED

if TYPE_CHECKING:  # the entry's model calls these checks
    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

def implied(data: Any) -> Any:
    """What an entry implies without saying it: a Debezium entry applies changes (mode replace), and a
    routed entry's table is its first route table."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    if data.get("format") == "debezium" and "mode" not in data:
        data["mode"] = REPLACE
    route = data.get("route")
    if isinstance(route, dict) and isinstance(route.get("tables"), dict) and route["tables"]:
        first = next(iter(route["tables"].values()))
        first = first.get("table") if isinstance(first, dict) else first  # an object, or the table's name
        if not isinstance(first, str):
            return data  # the route's own validation names what is wrong with it
        if "table" in data and data["table"] != first:
            raise ValueError(f"table {data['table']!r} beside route: a routed entry writes the tables under "
                             f"route.tables; remove table: (its table is the first of them, {first})")
        data.setdefault("table", first)
    return data


def check_entry(spec: PipelineSpec) -> None:
    """The rules between an entry's fields (ValueError naming the fields and the fix)."""
    _check_values(spec)
    _check_derived(spec)
    _check_changes(spec)
    if spec.route is not None:
        _check_route(spec)
        return
    # an entry taking its columns from a registry subject is checked once the subject gives them (with_columns)
    check_key(spec.key, spec.key if spec.columns_from_registry else spec.table_columns(), "the table",
              spec.columns)


def _check_values(spec: PipelineSpec) -> None:
    """One source of topics, and a format with what it needs to read the values: columns, an Avro schema."""
    given = [k for k in ("topic", "topics", "topic_pattern") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of topic, topics or topic_pattern ({', '.join(given) or 'none'} "
                         "given), e.g. topic: payments")
    if spec.format == "raw":
        if spec.columns or spec.derived:
            raise ValueError("format raw keeps key, value and headers as they are: remove columns and derived, "
                             "or use format json or avro")
    elif not spec.columns and spec.schema_registry is None and spec.route is None:
        raise ValueError(f"format {spec.format} needs columns: the value's fields, each with a type, e.g. "
                         "columns: {payment_id: {type: string, required: true}}")
    if spec.schema_registry is not None:
        if spec.format not in ("avro", "debezium"):
            raise ValueError("schema_registry is for Avro values in Confluent's wire format; set format: avro "
                             "(or format: debezium for Avro change events)")
        if "avro_wire_format" in spec.model_fields_set and spec.avro_wire_format != "confluent":
            raise ValueError("schema_registry reads Confluent's wire format (magic byte and schema id); remove "
                             "avro_wire_format: plain")
        if spec.schema_registry.subject is None and spec.topic is None:
            raise ValueError("schema_registry needs a subject when the entry reads topics or a topic_pattern; "
                             "e.g. schema_registry: {subject: payments-value}")
    elif spec.format == "avro" and not spec.avro_schema:
        raise ValueError("format avro needs avro_schema (the .avsc file, relative to the jobs file) or "
                         "schema_registry (the writer's schema of each value by its id)")
    if spec.format != "avro" and spec.avro_schema:
        raise ValueError(f"avro_schema is only for format avro, not {spec.format}; remove it or set format: avro")


def _check_derived(spec: PipelineSpec) -> None:
    """Derived columns have names of their own that PostgreSQL takes unquoted."""
    taken = {*spec.columns, *RESERVED, *RAW_COLUMNS, *([SOURCE_POSITION] if spec.format == "debezium" else [])}
    clash = sorted(set(spec.derived) & taken)
    if clash:
        raise ValueError(f"derived column(s) {', '.join(clash)} already exist; give them other names")
    for name in spec.derived:
        if not COLUMN_NAME.fullmatch(name):
            raise ValueError(f"derived column name {name!r} is not valid; use letters, digits and _")


def _check_changes(spec: PipelineSpec) -> None:
    """Deletes and Debezium's change events upsert and delete rows by a key that names them."""
    example = f"key: [{next(iter(spec.columns), 'id')}]"
    _check_debezium_settings(spec)
    if spec.position is not None and spec.format != "debezium":
        raise ValueError(f"position {spec.position!r} is the place of a Debezium change event in its source's "
                         "log and applies to format debezium only; remove it or set format: debezium")
    if spec.format == "debezium":
        _check_replaces_by_key(
            spec, f"mode {spec.mode} keeps a key's first version, and format debezium applies each change to its "
                  "row; remove mode (format debezium's default is replace)",
            f"format debezium needs key: the source table's primary key columns, which its changes name rows by "
            f"(key is {spec.key}); e.g. {example}")
    if spec.version != KAFKA_TIMESTAMP:
        _check_version(spec)
    if spec.deletes == TOMBSTONE:
        if spec.format == "raw":
            raise ValueError("deletes: tombstone reads a tombstone's key into the key columns, and format raw "
                             "has none; use format json, avro or debezium, or remove deletes")
        _check_replaces_by_key(
            spec, f"deletes: tombstone removes rows, which mode {spec.mode} never does; set mode: replace",
            f"deletes: tombstone needs a business key: the columns its Kafka key names a row by (key is "
            f"{spec.key}, which no tombstone carries); e.g. {example}")


def _check_version(spec: PipelineSpec) -> None:
    """`version:` names a column of the entry that orders a key's versions: a number, a date or a time, in an entry
    that keeps one version per key."""
    fix = f"name one of the entry's number, date or time columns, or version: {KAFKA_TIMESTAMP} (the default)"
    column = spec.columns.get(spec.version)
    if column is None or column.column_type.name not in ORDERED:
        raise ValueError(f"version {spec.version!r} is not a number, date or time column of the entry; {fix}")
    if spec.mode != REPLACE or spec.route is not None:
        raise ValueError(f"version {spec.version!r} orders the versions of a key, which only a mode replace entry "
                         "without routes keeps; set mode: replace, or remove version")
    if spec.format == "debezium" and spec.position_path is not None:
        raise ValueError(f"version {spec.version!r} beside position {spec.position_path}: a Debezium entry's "
                         "versions are ordered by their position in the source's log; set position: none to order "
                         "them by a column, or remove version")


def _check_debezium_settings(spec: PipelineSpec) -> None:
    """`debezium:` belongs to a Debezium entry, names its columns with types that fit them, and leaves no
    timestamp column's unit open (ValueError naming the column and the fix)."""
    settings = spec.debezium
    if settings is None:
        return
    if spec.format != "debezium":
        raise ValueError(f"debezium: says how a Debezium connector wrote values; it applies to format debezium "
                         f"only, not {spec.format}; remove it or set format: debezium")
    for column, name in settings.semantic_types.items():
        if column not in spec.columns:
            raise ValueError(f"debezium.semantic.types names {column!r}, which is no column of the entry (columns: "
                             f"{', '.join(spec.columns)}); name a declared column")
        kind = spec.columns[column].column_type.name
        full = settings.semantic_type(column)
        if kind not in FITS[full]:
            raise ValueError(f"debezium.semantic.types.{column} {name!r} does not land in column {column}'s type "
                             f"{kind}; give the column one of the types {', '.join(sorted(FITS[full]))}, or name "
                             "the type the connector writes for it")
    if settings.time_precision_mode in OPEN_UNIT_MODES:
        open_columns = [name for name, c in spec.columns.items()
                        if c.column_type.name == "timestamp" and name not in settings.semantic_types]
        if open_columns:
            first = open_columns[0]
            raise ValueError(
                f"column(s) {', '.join(open_columns)} (timestamp) of an event without a schema: under "
                f"time.precision.mode {settings.time_precision_mode} the connector writes a TIMESTAMP in "
                "milliseconds, microseconds or nanoseconds by the source column's precision, which the event does "
                f"not carry; name each one's type, e.g. debezium: {{semantic.types: {{{first}: MicroTimestamp}}}} "
                f"(one of {TIMESTAMP_TYPES}), or set time.precision.mode: connect (milliseconds) on the connector "
                "and here")


def _check_replaces_by_key(spec: PipelineSpec, not_replace: str, no_business_key: str) -> None:
    """Records that change rows need mode replace and a key that names rows (more than Kafka's coordinates);
    each message says what the entry's changes are."""
    if spec.mode != REPLACE:
        raise ValueError(not_replace)
    if all(k in COORDINATES for k in spec.key):
        raise ValueError(no_business_key)


def _check_route(spec: PipelineSpec) -> None:
    """A routed entry reads its table from the value: json or avro records that never delete."""
    if spec.format not in ("json", "avro"):
        raise ValueError(f"route reads each record's table from its value, for format json or avro, not "
                         f"{spec.format}; remove route, or give the other tables entries of their own")
    if spec.deletes != NO_DELETES:
        raise ValueError("route and deletes: tombstone do not go together: a tombstone has no value to route "
                         "by; remove deletes, or give the deletes an entry of their own")
    routes.check(spec.route, spec.route_tables(), entry_columns_pending=spec.columns_from_registry)

"""What a record of an entry that can delete says before its columns are read (docs/pipelines.md, "Deletes" and
"Change data capture"): the JSON object its columns read (the document), whether it deletes its key's row,
whether it is ignored, why its change cannot be applied, and a Debezium event's position in its source's log.

compile reads the document exactly as it reads a plain entry's value, so every type and rule works unchanged:
- `deletes: tombstone`: a null value's document is its Kafka key, a JSON object whose fields the key columns
  read, or, for one key column and a key that is no JSON object, `{"<field>": "<the key's text>"}`;
- `format: debezium`: the document of op c, r and u is `after`, of op d `before` (only its key columns are
  read); a null value (Debezium's tombstone after a delete) is ignored unless `deletes: tombstone`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from streamfill.changes import DELETE_COLUMN, TOMBSTONE
from streamfill.spark_jobs.pipelines import debezium
from streamfill.spark_jobs.pipelines.columns import COORDINATES
from streamfill.spark_jobs.pipelines.reasons import shown
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

DOCUMENT = "_document"  # the JSON text the columns read
IGNORED = "_ignored"  # a Debezium tombstone the entry does not apply: consumed, nothing written
CHANGE_ERROR = "_change_error"  # why the record's change cannot be applied (a dead letter's reason)
POSITION_TEXT = "_position"  # a Debezium event's position as the event writes it
KEY_SOURCE = "_key_source"  # where a delete's key came from, as its reasons name it
KEY_JSON, VALUE_JSON, EVENT = "_key_json", "_value_json", "_event"  # the key and the value parsed, unwrapped
TOMBSTONE_KEY, BEFORE_OF_DELETE = "tombstone key", f"{debezium.ROW_BEFORE} of op {debezium.DELETE}"
CORRUPT = "_corrupt"  # from_json's corrupt-record field: set when the text is no JSON object
PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


@dataclass(frozen=True)
class Projections:
    """The change's projections, in order. Each JSON text is parsed once, in a projection before the ones that
    read its fields (Spark keeps a projection whose costly column a later one reads many times apart)."""

    parsed: tuple[SparkColumn | str, ...]  # KEY_JSON of a tombstone, VALUE_JSON of a Debezium event
    unwrapped: tuple[SparkColumn | str, ...]  # EVENT: VALUE_JSON, or its payload parsed when it is wrapped
    change: tuple[SparkColumn | str, ...]  # DOCUMENT, `_delete`, IGNORED, CHANGE_ERROR, POSITION_TEXT, KEY_SOURCE


def key_columns(spec: PipelineSpec) -> list[str]:
    """The key columns a delete reads from its document (Kafka's coordinates come with every record)."""
    return [k for k in spec.key if k not in COORDINATES]


def projections(spec: PipelineSpec) -> Projections:
    """The projections that give an entry that can delete its change's columns beside Kafka's."""
    value = F.col("value")
    null = value.isNull()
    tombstone, events = spec.deletes == TOMBSTONE, spec.format == "debezium"
    key_paths = [spec.columns[name].field or name for name in key_columns(spec)]
    parsed = ["*"]
    if tombstone:
        parsed.append(F.when(null, _parsed(F.col("key").cast("string"), _tops(key_paths))).alias(KEY_JSON))
    if events:
        parsed.append(F.when(~null, _parsed(value.cast("string"), _event_fields(spec))).alias(VALUE_JSON))
    key_document, key_error = _tombstone_key(spec, key_paths) if tombstone else (F.lit(None), F.lit(None))
    if events:
        event_document, event_error, deletes, position = _event(spec)
    else:
        event_document, event_error = value.cast("string"), F.lit(None)
        deletes, position = F.lit(False), F.lit(None)
    change = ("*",
              F.when(null, key_document).otherwise(event_document).cast("string").alias(DOCUMENT),
              (null | deletes).alias(DELETE_COLUMN),
              (null & F.lit(not tombstone)).alias(IGNORED),
              F.when(null, key_error).otherwise(event_error).cast("string").alias(CHANGE_ERROR),
              F.when(~null, position).cast("string").alias(POSITION_TEXT),
              F.when(null, F.lit(TOMBSTONE_KEY)).otherwise(F.lit(BEFORE_OF_DELETE)).alias(KEY_SOURCE))
    return Projections(tuple(parsed), ("*", _unwrapped(spec).alias(EVENT)) if events else (), change)


def _tops(paths: list[str]) -> dict[str, str]:
    """The top-level fields of `paths`, each read as its JSON text."""
    return {p.split(".")[0]: "string" for p in paths}


def _parsed(text: SparkColumn, fields: dict[str, str]) -> SparkColumn:
    """The JSON object `text` as a struct of `fields` (name -> Spark type) and Kafka Connect's wrapper fields
    as their JSON text; CORRUPT is set when it is no JSON object."""
    names = {debezium.WRAPPER: "string", debezium.WRAPPED: "string", **fields}
    return F.from_json(text, ", ".join(f"`{f}` {t}" for f, t in sorted(names.items())) + f", {CORRUPT} string",
                       PERMISSIVE)


def _wrapped(parsed: SparkColumn, fields: dict[str, str]) -> SparkColumn:
    """The object is Kafka Connect's {schema, payload} wrapper (JsonConverter with schemas.enable): both set,
    and none of the fields read from an unwrapped one."""
    out = parsed.getField(debezium.WRAPPER).isNotNull() & parsed.getField(debezium.WRAPPED).isNotNull()
    for f in set(fields) - {debezium.WRAPPER, debezium.WRAPPED}:
        out = out & parsed.getField(f).isNull()
    return out


def _is_object(parsed: SparkColumn) -> SparkColumn:
    return parsed.isNotNull() & parsed.getField(CORRUPT).isNull()


def _tombstone_key(spec: PipelineSpec, paths: list[str]) -> tuple[SparkColumn, SparkColumn]:
    """(the document of a tombstone, why its key cannot be read) from the Kafka key (KEY_JSON: parsed)."""
    key = F.col("key")
    text, parsed = key.cast("string"), F.col(KEY_JSON)
    is_object = _is_object(parsed)
    object_text = text
    if spec.format == "debezium":  # Debezium's key may be wrapped like its value; another entry's is its own
        object_text = F.when(_wrapped(parsed, _tops(paths)), parsed.getField(debezium.WRAPPED)).otherwise(text)
    if len(paths) == 1:
        document = F.when(is_object, object_text).otherwise(F.to_json(_nested(paths[0], text)))
        not_object = F.lit(False)
    else:
        document, not_object = object_text, ~is_object
    invalid_utf8 = ~F.is_valid_utf8(text) | (F.encode(F.decode(key, "UTF-8"), "UTF-8") != key)
    error = (F.when(key.isNull(), F.lit("tombstone has no key"))
             .when(invalid_utf8, F.lit("tombstone key is not valid UTF-8"))
             .when(not_object, F.concat(F.lit(f"tombstone key is not a JSON object, as a key of {len(paths)} "
                                              "columns needs: "), shown(text))))
    return document, error


def _nested(path: str, text: SparkColumn) -> SparkColumn:
    """The struct whose JSON is {"a": {"b": text}} for path a.b: a one-column key's text at its field."""
    *parents, last = path.split(".")
    out = F.struct(text.alias(last))
    for name in reversed(parents):
        out = F.struct(out.alias(name))
    return out


ROW_FIELDS = (debezium.OP, debezium.ROW_BEFORE, debezium.ROW_AFTER)


def _event_fields(spec: PipelineSpec) -> dict[str, str]:
    """The fields of a Debezium event the parse reads: op, before and after as JSON text, and the position's
    path as nested structs down to its text (source.lsn: source struct<lsn string>), so it is parsed with the
    event. A position under before or after is read from their text instead."""
    fields = dict.fromkeys(ROW_FIELDS, "string")
    path = spec.position_path
    if path and path.split(".")[0] not in ROW_FIELDS:
        first, *rest = path.split(".")
        kind = "string"
        for name in reversed(rest):
            kind = f"struct<`{name}`: {kind}>"
        fields[first] = kind
    return fields


def _unwrapped(spec: PipelineSpec) -> SparkColumn:
    """The event, its payload parsed again only when it is wrapped (CASE evaluates the branch it takes)."""
    fields = _event_fields(spec)
    top = F.col(VALUE_JSON)
    return F.when(_wrapped(top, fields), _parsed(top.getField(debezium.WRAPPED), fields)).otherwise(top)


def _position(spec: PipelineSpec, event: SparkColumn) -> SparkColumn:
    """The text of the event's position (null without one)."""
    path = spec.position_path
    if not path:
        return F.lit(None).cast("string")
    first, _, rest = path.partition(".")
    if first in ROW_FIELDS:
        return F.get_json_object(event.getField(first), f"$.{rest}") if rest else event.getField(first)
    out = event
    for name in path.split("."):
        out = out.getField(name)
    return out


def _event(spec: PipelineSpec) -> tuple[SparkColumn, SparkColumn, SparkColumn, SparkColumn]:
    """(document, why the event cannot be applied, whether it deletes, its position) of a Debezium event
    (EVENT: parsed and unwrapped)."""
    path = spec.position_path
    event = F.col(EVENT)
    op = event.getField(debezium.OP)
    after, before = event.getField(debezium.ROW_AFTER), event.getField(debezium.ROW_BEFORE)
    upsert, delete = op.isin(*debezium.UPSERTS), op == F.lit(debezium.DELETE)
    position = _position(spec, event)
    checks = [
        (~_is_object(event), F.lit("invalid JSON")),
        (op.isNull(), F.lit(f"not a Debezium change event: it has no {debezium.OP}")),
        (~op.isin(*debezium.OPS), F.concat(F.lit("unknown Debezium op "), shown(op),
                                           F.lit(f"; streamfill applies {', '.join(debezium.OPS)}"))),
        (upsert & after.isNull(), F.concat(F.lit("op "), op, F.lit(f" has no {debezium.ROW_AFTER}"))),
        (delete & before.isNull(), F.lit(f"op {debezium.DELETE} has no {debezium.ROW_BEFORE}: the row to delete "
                                         "is unknown")),
    ]
    if path:
        checks += [
            (position.isNull(), F.lit(f"the change event has no {path}; set position: to the field that orders "
                                      f"the connector's changes, or position: {debezium.NO_POSITION}")),
            (~position.rlike("^[0-9]{1,38}$"), F.concat(F.lit(f"{path} is not a position (a whole number of at "
                                                              "most 38 digits): "), shown(position))),
        ]
    error = F.lit(None).cast("string")
    for cond, reason in reversed(checks):  # the first one broken wins
        error = F.when(cond, reason).otherwise(error)
    return F.when(upsert, after).when(delete, before), error, F.coalesce(delete, F.lit(False)), position

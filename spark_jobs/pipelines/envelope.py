"""What a record of an entry that can delete says before its columns are read (docs/pipelines.md, "Deletes" and
"Change data capture"): the JSON object its columns read (the document), whether it deletes its key's row,
whether it is ignored, why its change cannot be applied, and a Debezium event's position in its source's log.

compile reads the document exactly as it reads a plain entry's value, so every type and rule works unchanged:
- `deletes: tombstone`: a null value's document is its Kafka key as its serializer wrote it: a JSON object (or
  Kafka Connect's {schema, payload} around one) whose fields the key columns read; for one key column, a JSON
  string, number or boolean is that column's value, and a key that is no JSON its text. Read in Spark, so an
  entry that is not Debezium's adds no Python step to its read.
- `format: debezium`: the read's Python tasks read each event (spark_jobs.pipelines.change_events): the
  document of op c, r and u is `after`, of op d `before` (only its key columns are read); a null value
  (Debezium's tombstone after a delete) is ignored unless `deletes: tombstone`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from streamfill.changes import DELETE_COLUMN, TOMBSTONE
from streamfill.spark_jobs.pipelines import change_events, debezium
from streamfill.spark_jobs.pipelines.columns import COORDINATES
from streamfill.spark_jobs.pipelines.reasons import shown
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

DOCUMENT = "_document"  # the JSON text the columns read
IGNORED = "_ignored"  # a Debezium tombstone the entry does not apply: consumed, nothing written
CHANGE_ERROR = "_change_error"  # why the record's change cannot be applied (a dead letter's reason)
POSITION_TEXT = "_position"  # a Debezium event's position as the event writes it
KEY_SOURCE = "_key_source"  # where a delete's key came from, as its reasons name it
KEY_JSON = "_key_json"  # a tombstone's key parsed (a variant; null when it is no JSON)
TOMBSTONE_KEY = "tombstone key"
CORRUPT = "_corrupt"  # from_json's corrupt-record field: set when the text is no JSON object
PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


@dataclass(frozen=True)
class Projections:
    """The change's projections, in order. Each JSON text is parsed once, in a projection before the ones that
    read its fields (Spark keeps a projection whose costly column a later one reads many times apart)."""

    parsed: tuple[SparkColumn | str, ...]  # KEY_JSON of a tombstone
    unwrapped: tuple[SparkColumn | str, ...]  # none since Debezium's events are read in Python
    change: tuple[SparkColumn | str, ...]  # DOCUMENT, `_delete`, IGNORED, CHANGE_ERROR, POSITION_TEXT, KEY_SOURCE


def key_columns(spec: PipelineSpec) -> list[str]:
    """The key columns a delete reads from its document (Kafka's coordinates come with every record)."""
    return [k for k in spec.key if k not in COORDINATES]


def projections(spec: PipelineSpec) -> Projections:
    """The projections that give an entry that can delete its change's columns beside Kafka's; a Debezium
    entry's read has added change_events' columns."""
    value = F.col("value")
    null = value.isNull()
    tombstone, events = spec.deletes == TOMBSTONE, spec.format == "debezium"
    key_paths = [spec.columns[name].field or name for name in key_columns(spec)]
    parsed = ("*", F.when(null, F.try_parse_json(F.col("key").cast("string"))).alias(KEY_JSON)) if tombstone else ()
    key_document, key_error = _tombstone_key(spec, key_paths) if tombstone else (F.lit(None), F.lit(None))
    if events:
        event_document = F.col(change_events.DOCUMENT).cast("string")
        event_error, deletes = F.col(change_events.ERROR), F.col(change_events.DELETES)
        position = F.col(change_events.POSITION)
        key_source = F.coalesce(F.col(change_events.KEY_SOURCE), F.lit(change_events.BEFORE_OF_DELETE))
    else:
        event_document, event_error = value.cast("string"), F.lit(None)
        deletes, position, key_source = F.lit(False), F.lit(None), F.lit(change_events.BEFORE_OF_DELETE)
    change = ("*",
              F.when(null, key_document).otherwise(event_document).cast("string").alias(DOCUMENT),
              (null | deletes).alias(DELETE_COLUMN),
              (null & F.lit(not tombstone)).alias(IGNORED),
              F.when(null, key_error).otherwise(event_error).cast("string").alias(CHANGE_ERROR),
              F.when(~null, position).cast("string").alias(POSITION_TEXT),
              F.when(null, F.lit(TOMBSTONE_KEY)).otherwise(key_source).alias(KEY_SOURCE))
    return Projections(parsed, (), change)


def _member(variant: SparkColumn, name: str) -> SparkColumn:
    """An object's field as a variant: SQL null when it has none, a variant null when it holds JSON null."""
    return F.try_variant_get(variant, f"$['{name}']", "variant")


def _set(variant: SparkColumn) -> SparkColumn:
    return variant.isNotNull() & ~F.is_variant_null(variant)


def _tombstone_key(spec: PipelineSpec, paths: list[str]) -> tuple[SparkColumn, SparkColumn]:
    """(the document of a tombstone, why its key names no row) from the Kafka key (KEY_JSON: parsed)."""
    key = F.col("key")
    text, parsed = key.cast("string"), F.col(KEY_JSON)
    kind = F.schema_of_variant(parsed)  # OBJECT<...>, STRING, BIGINT, ...; null for a key that is no JSON
    payload = _member(parsed, debezium.WRAPPED)
    # Kafka Connect's JsonConverter with schemas.enable: {schema, payload}, and none of the fields the key reads
    wrapped = F.coalesce(kind.startswith("OBJECT"), F.lit(False)) & _set(_member(parsed, debezium.WRAPPER)) \
        & _set(payload)
    for top in sorted({p.split(".")[0] for p in paths} - {debezium.WRAPPER, debezium.WRAPPED}):
        wrapped = wrapped & _member(parsed, top).isNull()
    inner = F.when(wrapped, payload).otherwise(parsed)
    inner_kind = F.when(wrapped, F.schema_of_variant(payload)).otherwise(kind)
    is_object = F.coalesce(inner_kind.startswith("OBJECT"), F.lit(False))
    object_text = F.when(wrapped, F.to_json(payload)).otherwise(text)
    # a JSON string's value, a number's or a boolean's text as written (1.50 stays 1.50), a payload's as its
    # variant gives it; a key that is no JSON is its own text
    scalar = (F.when(kind.isNull(), text).when(wrapped | (kind == F.lit("STRING")),
                                                 F.try_variant_get(inner, "$", "string"))
              .otherwise(F.trim(text)))
    if len(paths) == 1:
        document = F.when(is_object, object_text).otherwise(F.to_json(_nested(paths[0], scalar)))
        not_object = F.lit(False)
    else:
        document, not_object = object_text, ~is_object
    invalid_utf8 = ~F.is_valid_utf8(text) | (F.encode(F.decode(key, "UTF-8"), "UTF-8") != key)
    # a registry serializer's key: a zero byte and the schema id first (the registry's decode replaced it if it could)
    wire = (F.length(key) >= 5) & (F.hex(F.substring(key, 1, 1)) == F.lit("00"))
    schema_id = F.conv(F.hex(F.substring(key, 2, 4)), 16, 10)
    unread = ("which the schema registry did not decode" if spec.schema_registry is not None else
              "an entry reads such keys with schema_registry")
    error = (F.when(key.isNull(), F.lit("tombstone has no key"))
             .when(wire, F.concat(F.lit("tombstone key is Avro in Confluent's wire format (schema id "), schema_id,
                                  F.lit(f"); {unread}")))
             .when(invalid_utf8, F.lit("tombstone key is not valid UTF-8"))
             .when(inner_kind == F.lit("VOID"), F.lit("tombstone key is JSON null, which names no row"))
             .when(inner_kind.startswith("ARRAY"), F.concat(F.lit("tombstone key is a JSON array, which names no "
                                                                  "row: "), shown(text)))
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

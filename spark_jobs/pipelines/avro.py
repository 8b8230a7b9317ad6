"""Avro values to JSON text, in Python (fastavro), so Avro and JSON pipelines share one typed path.

`plain`: each value is one Avro datum of the entry's schema. `confluent`: Confluent's wire format, a zero magic
byte and a 4-byte schema id before the datum; without a registry the schema file must be the writer's schema,
with one (`registry`, spark_jobs.pipelines.registry) the id gives the writer's schema and the entry's schema, if
any, is the reader's, resolved by Avro's rules. A value that does not decode (an unknown id included) keeps its
bytes and gets a reason in `_avro_error`; it becomes a dead letter. A registry that does not answer fails the
task instead.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Hashable, Iterator, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING
from uuid import UUID

import pyarrow as pa

from streamfill.changes import TOMBSTONE
from streamfill.spark_jobs.pipelines.registry import UnknownSchemaId, client_settings, writer_schema

if TYPE_CHECKING:  # the read's tasks import this module without Spark's DataFrame
    from pyspark.sql import DataFrame

    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

WIRE_FORMATS = ("plain", "confluent")


def _jsonable(v: object) -> object:
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (datetime, date, time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    if isinstance(v, UUID):
        return str(v)
    raise TypeError(f"{type(v).__name__} is not JSON serialisable")


def decode(value: bytes, schema, wire_format: str = "plain", registry: Mapping[str, str] | None = None
           ) -> tuple[object, object, Hashable, str | None]:
    """(the datum, the parsed schema it follows, a key naming that schema, None) or (None, None, None, why it did
    not decode). With `registry`, `schema` is the reader schema (or None: the writer's as it is)."""
    import fastavro

    writer, reader, what, key = schema, None, "the entry's schema", ("entry",)
    if wire_format == "confluent":
        if len(value) < 5 or value[0] != 0:
            return None, None, None, "value is not in Confluent's wire format (no zero magic byte and schema id)"
        if registry is not None:
            schema_id = int.from_bytes(value[1:5], "big")
            try:
                writer, reader = writer_schema(registry, schema_id), schema
            except UnknownSchemaId as exc:
                return None, None, None, (f"schema id {schema_id} is unknown to the schema registry "
                                          f"{registry['url']}: {exc}")[:500]
            what = f"its writer schema (id {schema_id})" + (" read as the entry's schema" if reader else "")
            key = (registry["url"], schema_id, reader is not None)
        value = value[5:]
    buffer = io.BytesIO(value)
    try:
        datum = fastavro.schemaless_reader(buffer, writer, reader)
    except Exception as exc:  # any decoding or resolution failure makes a dead letter
        return None, None, None, f"value is not Avro of {what}: {type(exc).__name__}: {exc}"[:500]
    if buffer.tell() != len(value):
        return None, None, None, f"value is not Avro of {what}: {len(value) - buffer.tell()} bytes left over"
    return datum, reader if reader is not None else writer, key, None


def named_types(parsed: object) -> Mapping[str, object]:
    """The named types of a schema fastavro parsed, by full name."""
    return parsed.get("__named_schemas", {}) if isinstance(parsed, Mapping) else {}


def to_json(value: bytes, schema, wire_format: str = "plain",
            registry: Mapping[str, str] | None = None) -> tuple[bytes | None, str | None]:
    """(JSON text of the datum, None) or (None, why it did not decode). With `registry`, `schema` is the reader
    schema (or None: the writer's as it is)."""
    datum, _, _, why = decode(value, schema, wire_format, registry)
    if why is not None:
        return None, why
    return json.dumps(datum, default=_jsonable, ensure_ascii=False).encode(), None


def to_json_batches(batches: Iterator[pa.RecordBatch], schema: dict | None, wire_format: str = "plain",
                    registry: Mapping[str, str] | None = None, keys: bool = False) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: every column kept, `value` replaced by the datum's JSON, `_avro_error` and `_original`
    (the bytes as they came, for dead letters) added. `keys`: a tombstone's key in Confluent's wire format is
    replaced by its datum's JSON too (the registry knows its writer schema by its id); any other key stays."""
    import fastavro

    parsed = fastavro.parse_schema(schema) if schema is not None else None
    for batch in batches:
        values, errors = [], []
        for value in batch.column("value").to_pylist():
            if value is None:
                values.append(None)
                errors.append(None)
                continue
            text, error = to_json(value, parsed, wire_format, registry)
            values.append(value if text is None else text)
            errors.append(error)
        replaced = {"value": pa.array(values, pa.binary())}
        if keys and registry is not None:
            replaced["key"] = pa.array(_tombstone_keys(batch, registry), pa.binary())
        columns = [replaced.get(name, batch.column(name)) for name in batch.schema.names]
        yield pa.RecordBatch.from_arrays([*columns, pa.array(errors, pa.string()), batch.column("value")],
                                         names=[*batch.schema.names, "_avro_error", "_original"])


def _tombstone_keys(batch: pa.RecordBatch, registry: Mapping[str, str]) -> list[bytes | None]:
    """The batch's keys, each of a null value in Confluent's wire format as its datum's JSON. A key that does
    not decode stays as it came: the parse then says why it names no row."""
    out = []
    for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True):
        text = None
        if value is None and key is not None and key[:1] == b"\0":
            text, _ = to_json(key, None, "confluent", registry)
        out.append(key if text is None else text)
    return out


def decode_avro(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Avro values decoded in Python (fastavro, inside the read's own tasks) into JSON text, so Avro and JSON share
    one typed path and one set of rules; `_avro_error` says why a value did not decode. Spark's from_avro would
    need the spark-avro jar, which PySpark does not ship."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = json.loads(spec.avro_schema_path.read_text()) if spec.avro_schema else spec.registry_reader_schema
    wire = spec.wire_format
    registry = client_settings(spec.schema_registry.url) if spec.schema_registry is not None else None
    keys = spec.deletes == TOMBSTONE and registry is not None  # a tombstone's key read by the registry too
    # a new schema: StructType.add would change the input DataFrame's own
    out_schema = StructType([*kafka.schema.fields, StructField("_avro_error", StringType()),
                             StructField("_original", BinaryType())])

    def decode(batches: Iterator) -> Iterator:
        yield from to_json_batches(batches, schema, wire, registry, keys)

    return kafka.mapInArrow(decode, out_schema)

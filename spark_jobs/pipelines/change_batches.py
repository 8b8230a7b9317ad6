"""The read's Python step of a Debezium entry (mapInArrow, inside the read's own tasks): each record's change
event read by change_events, JSON or Avro alike, into the columns envelope.projections reads. Only Debezium
entries take this step; a plain JSON entry's values never leave the JVM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from streamfill.spark_jobs.pipelines import debezium
from streamfill.spark_jobs.pipelines.change_events import (
    DELETES,
    DOCUMENT,
    ENCODE,
    ERROR,
    KEY_SOURCE,
    NO_EVENT,
    POSITION,
    EventReader,
    reader_of,
)
from streamfill.spark_jobs.pipelines.connect_types import Undecodable, of_avro, plain

if TYPE_CHECKING:  # the read's tasks import this module without Spark's DataFrame
    from pyspark.sql import DataFrame

    from streamfill.spark_jobs.pipelines.spec import PipelineSpec


def read_batches(batches: Iterator[pa.RecordBatch], reader: EventReader, tombstones: bool,
                 avro: tuple | None = None) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: every column kept, a tombstone's key made plain (with `tombstones`), and DOCUMENT,
    DELETES, POSITION, ERROR and KEY_SOURCE added. `avro` (reader schema, registry settings): values in
    Confluent's wire format, decoded first; `value` then holds the row's JSON (the parse's UTF-8 check reads
    it), `_original` the bytes as they came, `_avro_error` why one did not decode."""
    import fastavro

    from streamfill.spark_jobs.pipelines import avro as avro_values

    if avro is not None:  # the entry's reader schema, parsed once per task
        avro = (fastavro.parse_schema(avro[0]) if avro[0] is not None else None, avro[1])
    for batch in batches:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        results, decoded, avro_errors = [], [], []
        plain_keys = None  # the keys, once a tombstone's is made plain
        for n, (key, value) in enumerate(zip(keys, values, strict=True)):
            if value is None:
                results.append(NO_EVENT)
                decoded.append(None)
                avro_errors.append(None)
                if tombstones and key is not None:
                    document = _avro_key(reader, key, avro) if avro and key[:1] == b"\0" else \
                        reader.key_document(key)
                    if document is not None:
                        plain_keys = plain_keys or list(keys)
                        plain_keys[n] = document
                continue
            if avro is None:
                results.append(reader.read(value, key))
                continue
            datum, schema, schema_key, why = avro_values.decode(value, avro[0], "confluent", avro[1])
            if why is not None:
                results.append(NO_EVENT)
                decoded.append(value)
                avro_errors.append(why)
                continue
            if key and key[:1] == b"\0" and isinstance(datum, dict) and datum.get(debezium.ROW_BEFORE) is None:
                key = _avro_key(reader, key, avro)  # a delete without before reads its key
            result = reader.read_datum(datum, schema_key, schema, avro_values.named_types(schema), key)
            results.append(result)
            decoded.append(result.document or b"{}")
            avro_errors.append(None)
        replaced = {} if plain_keys is None else {"key": pa.array(plain_keys, pa.binary())}
        extra_names, extra = [], []
        if avro is not None:
            replaced["value"] = pa.array(decoded, pa.binary())
            extra_names, extra = ["_avro_error", "_original"], [pa.array(avro_errors, pa.string()),
                                                               batch.column("value")]
        columns = [replaced.get(name, batch.column(name)) for name in batch.schema.names]
        documents, deletes, positions, errors, sources = zip(*results, strict=True) if results else ((),) * 5
        yield pa.RecordBatch.from_arrays(
            [*columns, *extra, pa.array(documents, pa.binary()), pa.array(deletes, pa.bool_()),
             pa.array(positions, pa.string()), pa.array(errors, pa.string()), pa.array(sources, pa.string())],
            names=[*batch.schema.names, *extra_names, DOCUMENT, DELETES, POSITION, ERROR, KEY_SOURCE])


def _avro_key(reader: EventReader, key: bytes, avro: tuple) -> bytes | None:
    """A key in Confluent's wire format as plain JSON (its record's fields by their semantic types); None when it
    does not decode (the parse says the key names no row)."""
    from streamfill.spark_jobs.pipelines import avro as avro_values

    datum, schema, _, why = avro_values.decode(key, None, "confluent", avro[1])
    if why is not None:
        return None
    if isinstance(datum, dict):
        convert = of_avro(schema, avro_values.named_types(schema))
        try:
            datum = convert(datum) if convert is not None else datum
        except Undecodable:
            return None
        if reader.mongo_id and debezium.MONGODB_ID not in datum and isinstance(datum.get(debezium.MONGODB_KEY_ID),
                                                                               str):
            return reader.key_document(ENCODE({debezium.MONGODB_KEY_ID: datum[debezium.MONGODB_KEY_ID]}))
    return ENCODE(plain(datum))


def decode_changes(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """The entry's Debezium events read in Python (mapInArrow, inside the read's own tasks), JSON or Avro alike:
    the columns envelope.projections reads. Only Debezium entries take this step; a plain JSON entry's values
    never leave the JVM."""
    from pyspark.sql.types import BinaryType, BooleanType, StringType, StructField, StructType

    from streamfill.changes import TOMBSTONE
    from streamfill.spark_jobs.pipelines.registry import client_settings

    reader, tombstones = reader_of(spec), spec.deletes == TOMBSTONE
    avro = None
    if spec.avro_values:
        avro = (spec.registry_reader_schema, client_settings(spec.schema_registry.url))
    extra = [StructField("_avro_error", StringType()), StructField("_original", BinaryType())] if avro else []
    out_schema = StructType([*kafka.schema.fields, *extra, StructField(DOCUMENT, BinaryType()),
                             StructField(DELETES, BooleanType()), StructField(POSITION, StringType()),
                             StructField(ERROR, StringType()), StructField(KEY_SOURCE, StringType())])

    def read(batches: Iterator) -> Iterator:
        yield from read_batches(batches, reader, tombstones, avro)

    return kafka.mapInArrow(read, out_schema)

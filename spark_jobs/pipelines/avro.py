"""Avro values to JSON text, in Python (fastavro), so Avro and JSON pipelines share one typed path.

`plain`: each value is one Avro datum of the entry's schema. `confluent`: Confluent's wire format, a zero magic
byte and a 4-byte schema id before the datum (the schema file must be the writer's schema). A value that does
not decode keeps its bytes and gets a reason in `_avro_error`; it becomes a dead letter.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from datetime import date, datetime, time
from decimal import Decimal
from uuid import UUID

import pyarrow as pa

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


def to_json(value: bytes, schema, wire_format: str = "plain") -> tuple[bytes | None, str | None]:
    """(JSON text of the datum, None) or (None, why it did not decode)."""
    import fastavro

    if wire_format == "confluent":
        if len(value) < 5 or value[0] != 0:
            return None, "value is not in Confluent's wire format (no zero magic byte and schema id)"
        value = value[5:]
    buffer = io.BytesIO(value)
    try:
        datum = fastavro.schemaless_reader(buffer, schema)
    except Exception as exc:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"value is not Avro of the entry's schema: {type(exc).__name__}: {exc}"[:500]
    if buffer.tell() != len(value):
        return None, f"value is not Avro of the entry's schema: {len(value) - buffer.tell()} bytes left over"
    return json.dumps(datum, default=_jsonable, ensure_ascii=False).encode(), None


def to_json_batches(batches: Iterator[pa.RecordBatch], schema: dict,
                    wire_format: str = "plain") -> Iterator[pa.RecordBatch]:
    """mapInArrow body: every column kept, `value` replaced by the datum's JSON, `_avro_error` and `_original`
    (the bytes as they came, for dead letters) added."""
    import fastavro

    parsed = fastavro.parse_schema(schema)
    for batch in batches:
        values, errors = [], []
        for value in batch.column("value").to_pylist():
            if value is None:
                values.append(None)
                errors.append(None)
                continue
            text, error = to_json(value, parsed, wire_format)
            values.append(value if text is None else text)
            errors.append(error)
        columns = [pa.array(values, pa.binary()) if name == "value" else batch.column(name)
                   for name in batch.schema.names]
        yield pa.RecordBatch.from_arrays([*columns, pa.array(errors, pa.string()), batch.column("value")],
                                         names=[*batch.schema.names, "_avro_error", "_original"])

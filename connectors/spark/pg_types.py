"""Spark's types as the PostgreSQL types `streamfill_postgres` creates columns with (and stages them as)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from streamfill.errors import SinkError

_SIMPLE: list[tuple[type[DataType], str]] = [
    (StringType, "text"), (BinaryType, "bytea"), (BooleanType, "boolean"), (ByteType, "smallint"),
    (ShortType, "smallint"), (IntegerType, "integer"), (LongType, "bigint"), (FloatType, "real"),
    (DoubleType, "double precision"), (DateType, "date"), (TimestampNTZType, "timestamp"),
    (TimestampType, "timestamptz"),
]


def pg_type(name: str, t: DataType) -> str:
    if isinstance(t, DecimalType):
        return f"numeric({int(t.precision)}, {int(t.scale)})"
    if isinstance(t, (ArrayType, MapType, StructType)):
        return "jsonb"
    for cls, pg in _SIMPLE:
        if isinstance(t, cls):
            return pg
    raise SinkError(f"column {name!r} has Spark type {t.simpleString()}, which streamfill_postgres cannot store; "
                    "cast it (e.g. to string) before writing")

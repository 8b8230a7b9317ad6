"""`debezium:` of a Debezium entry: how its connector wrote the values of events that come without their schema
(JsonConverter with schemas.enable=false), named as the connector's own properties so they are copied from its
config (docs/pipelines.md, "Change data capture"). An event with a schema is read by that schema; the settings
read the rest, with the column's declared type: a decimal column's text under `decimal.handling.mode: precise` is
the base64 of its unscaled value at the column's scale, a date column's number is days since the epoch. Where
the modes leave a value open, `semantic.types` names the field's type as the connector's schema would.
entry_checks checks them against the entry's columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from streamfill.spark_jobs.pipelines.connect_types import (
    CONNECT_DECIMAL,
    SEMANTIC,
    Converter,
    Undecodable,
    decimal_of,
    full_name,
)

DECIMAL_MODES = ("precise", "double", "string")  # decimal.handling.mode, Debezium's default first
# time.precision.mode, Debezium's PostgreSQL default first (MySQL's is adaptive_time_microseconds)
TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect", "microseconds", "nanoseconds", "isostring",
              "structured")
# a TIMESTAMP's number in each mode that fixes its unit: the semantic type it is
TIMESTAMP_OF_MODE = {"connect": "io.debezium.time.Timestamp", "microseconds": "io.debezium.time.MicroTimestamp",
                     "nanoseconds": "io.debezium.time.NanoTimestamp"}
# the modes where a TIMESTAMP's unit follows the source column's precision, which no schemaless event carries
OPEN_UNIT_MODES = ("adaptive", "adaptive_time_microseconds")
TIMESTAMP_TYPES = ("Timestamp (TIMESTAMP(0-3), DATETIME), MicroTimestamp (TIMESTAMP(4-6), PostgreSQL's TIMESTAMP), "
                   "NanoTimestamp (TIMESTAMP(7-9)), ZonedTimestamp (TIMESTAMP WITH TIME ZONE)")


class DebeziumSettings(BaseModel):
    """The connector's settings that decide how a value without a schema reads."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    decimal_handling_mode: str = Field(DECIMAL_MODES[0], alias="decimal.handling.mode")
    time_precision_mode: str = Field(TIME_MODES[0], alias="time.precision.mode")
    # column -> its semantic type (full or short name: io.debezium.time.MicroTimestamp or MicroTimestamp)
    semantic_types: dict[str, str] = Field(default_factory=dict, alias="semantic.types")

    @field_validator("decimal_handling_mode", "time_precision_mode")
    @classmethod
    def _mode(cls, v: str, info) -> str:
        name, modes = {"decimal_handling_mode": ("decimal.handling.mode", DECIMAL_MODES),
                       "time_precision_mode": ("time.precision.mode", TIME_MODES)}[info.field_name]
        if v not in modes:
            raise ValueError(f"{name} {v!r} is not one of Debezium's modes ({', '.join(modes)}); copy the value of "
                             f"the connector's {name} (without one it is {modes[0]})")
        return v

    @field_validator("semantic_types")
    @classmethod
    def _known(cls, v: dict[str, str]) -> dict[str, str]:
        for column, name in v.items():
            if full_name(name) is None:
                raise ValueError(f"semantic.types.{column} {name!r} is not a semantic type streamfill reads; use "
                                 f"one the connector's schema names, e.g. MicroTimestamp or "
                                 f"io.debezium.time.MicroTimestamp ({len(SEMANTIC)} known: the types of "
                                 "org.apache.kafka.connect.data and io.debezium.time, io.debezium.data)")
        return v

    def semantic_type(self, column: str) -> str | None:
        """The full name of the semantic type the entry names for a column, if any."""
        name = self.semantic_types.get(column)
        return full_name(name) if name is not None else None


def without_schema(kind: str | None, scale: int | None, semantic: str | None, decimal_mode: str,
                   time_mode: str) -> Converter | None:
    """How a field no schema describes reads: by the semantic type the entry names for its column (`semantic`,
    a full name), else by the column's declared type (`kind`, a decimal's `scale`) and the connector's modes;
    None when its value is read as it is."""
    if semantic is not None:
        return decimal_of(scale) if semantic == CONNECT_DECIMAL else SEMANTIC[semantic]({})
    if kind == "decimal" and decimal_mode == "precise":
        return _precise(scale)
    if kind == "date":
        return _date_number
    if kind == "timestamp":
        return _timestamp_number(time_mode)
    return None


def _precise(scale: int | None) -> Converter:
    """decimal.handling.mode precise: text is the base64 of the unscaled value at the column's scale, a struct a
    VariableScaleDecimal (NUMERIC without a scale); a number is itself."""
    decimal = decimal_of(scale)
    variable = SEMANTIC["io.debezium.data.VariableScaleDecimal"]({})

    def convert(value: object) -> object:
        if isinstance(value, Mapping):
            return variable(value)
        return decimal(value) if isinstance(value, (str, bytes)) else value
    return convert


def _date_number(value: object) -> object:
    """A number is days since the epoch (every mode but isostring and structured); IsoDate's text loses its Z,
    StructuredDate its fields."""
    if isinstance(value, Mapping):
        return SEMANTIC["io.debezium.time.StructuredDate"]({})(value)
    if isinstance(value, str):
        return SEMANTIC["io.debezium.time.IsoDate"]({})(value)
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return SEMANTIC["io.debezium.time.Date"]({})(value)
    return value


def _timestamp_number(mode: str) -> Converter:
    """A number is time since the epoch in the mode's unit; adaptive modes leave it open (a dead letter naming
    the fix: the entry's checks refuse it with `debezium:`). Text (ZonedTimestamp, IsoTimestamp) is itself."""
    named = TIMESTAMP_OF_MODE.get(mode)
    epoch = SEMANTIC[named]({}) if named else None

    def convert(value: object) -> object:
        if isinstance(value, Mapping):
            name = "io.debezium.time.StructuredZonedTimestamp" if "offsetSeconds" in value else \
                "io.debezium.time.StructuredTimestamp"
            return SEMANTIC[name]({})(value)
        if not isinstance(value, (int, Decimal)) or isinstance(value, bool):
            return value
        if epoch is None:
            raise Undecodable(f"time.precision.mode {mode}", value, "is milliseconds, microseconds or nanoseconds "
                              "by the source column's precision, which an event without a schema does not carry; "
                              f"name its type under debezium: semantic.types (one of {TIMESTAMP_TYPES})")
        return epoch(value)
    return convert

"""A typed column of a pipeline entry (docs/pipelines.md, "Types" and "Rules"): its type, its rules and the field
of the value it reads; and the names the platform keeps for its own columns. An entry's `columns:` and a routed
table's `columns:` are both made of these."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, field_validator, model_validator

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION
from streamfill.rules import Rule, rules_of
from streamfill.spark_jobs.pipelines.types import NUMERIC, ORDERED, ColumnType, TypeSyntaxError, parse_type

KAFKA_TIMESTAMP = "kafka_timestamp"
COORDINATES = ("topic", "partition", "offset", KAFKA_TIMESTAMP)  # every table has them
COORDINATE_TYPES = dict(zip(COORDINATES, ("string", "int", "bigint", "timestamp"), strict=True))  # as an entry's types
# source_position too, in every format: the sink orders a key's versions by a column of that name first
RESERVED = (*COORDINATES, "_error", "_raw", DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION)
RAW_COLUMNS = ("key", "value", "headers")  # format raw: the record as it came
COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
FIELD_PATH = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*(\.[A-Za-z_$][A-Za-z0-9_$-]*)*")


class ColumnSpec(BaseModel):
    """A typed column of the table, read from the value's field `field` (default: the column's name)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    type: str
    required: bool = False
    min: Decimal | str | None = None  # numbers for number columns, ISO-8601 text for date and timestamp
    max: Decimal | str | None = None
    in_: list[Any] | None = Field(None, alias="in")
    pattern: str | None = None
    max_length: StrictInt | None = Field(None, ge=1)
    field: str | None = None

    _type: ColumnType = PrivateAttr()

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        try:
            parse_type(v)
        except TypeSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("min", "max", mode="before")
    @classmethod
    def _bound(cls, v: Any) -> Any:
        if isinstance(v, (date, datetime)):  # YAML reads 2026-01-01 as a date
            return v.isoformat()
        if isinstance(v, bool):
            raise ValueError(f"{v} is not a bound; give a number, or an ISO-8601 date or time")
        return v

    @field_validator("field")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not FIELD_PATH.fullmatch(v):
            raise ValueError(f"field {v!r} is not a path into the value; use names joined by dots, e.g. customer.id")
        return v

    @model_validator(mode="after")
    def _rules_fit_the_type(self) -> ColumnSpec:
        t = parse_type(self.type)
        self._type = t
        kind = t.name
        if (self.min is not None or self.max is not None) and kind not in ORDERED:
            raise ValueError(f"min/max do not apply to type {t}; use them on int, bigint, double, decimal, date or "
                             "timestamp columns")
        limits = {"int": 2**31, "bigint": 2**63}
        for rule in ("min", "max"):
            value = getattr(self, rule)
            if kind in NUMERIC and isinstance(value, str):
                raise ValueError(f"{rule} {value!r} is not a number, as a {t} column needs")
            if kind in limits and value is not None and (value != value.to_integral_value()
                                                         or not -limits[kind] <= value < limits[kind]):
                raise ValueError(f"{rule} {value} is not a whole number that fits {t}; give one, e.g. {rule}: 0")
            if kind in ("date", "timestamp") and value is not None and not _iso(str(value)):
                raise ValueError(f"{rule} {value!r} is not an ISO-8601 {kind}, as a {t} column needs, "
                                 "e.g. 2026-01-01")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}; make min at most max")
        if self.in_ is not None:
            if kind not in ("string", "int", "bigint", "decimal", "double", "date"):
                raise ValueError(f"in does not apply to type {t}; use it on string or number columns")
            if not self.in_:
                raise ValueError("in lists no value; list the allowed values, e.g. in: [EUR, USD]")
            if kind in NUMERIC and not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.in_):
                raise ValueError(f"in {self.in_} has values that are not numbers, as a {t} column needs")
            if kind in ("string", "date") and not all(isinstance(v, str) for v in self.in_):
                odd = [v for v in self.in_ if not isinstance(v, str)]
                raise ValueError(f"in {self.in_} has values that are not text ({odd}; YAML reads no, on, yes and "
                                 "dates as other types); quote them, e.g. in: [\"NO\", \"ON\"]")
        if self.pattern is not None:
            if kind != "string":
                raise ValueError(f"pattern does not apply to type {t}; use it on string columns")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regular expression ({exc})") from None
        if self.max_length is not None and kind != "string":
            raise ValueError(f"max_length does not apply to type {t}; use it on string columns")
        return self

    @property
    def column_type(self) -> ColumnType:
        return self._type

    def rules(self, key: bool = False) -> tuple[Rule, ...]:
        """The column's rules in the order they are checked (streamfill.rules); a key column is always required."""
        return rules_of({**self.model_dump(by_alias=True), "required": self.required or key})


def _iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def check_column_names(columns: Mapping[str, ColumnSpec]) -> None:
    """Each name is one PostgreSQL takes unquoted and none is a platform's column (ValueError naming it)."""
    for name in columns:
        if not COLUMN_NAME.fullmatch(name):
            raise ValueError(f"column name {name!r} is not valid; use letters, digits and _ (at most 63), "
                             "starting with a letter or _")
        if name in RESERVED:
            raise ValueError(f"column name {name!r} is taken by the platform ({', '.join(RESERVED)}); "
                             f"name it otherwise and read it with field: {name}")



def check_key(key: list[str], known: list[str], table: str, example_columns) -> None:
    """A key names columns of its table (`known`), each once; `table` says which table in the message."""
    missing = [k for k in key if k not in known]
    if missing:
        raise ValueError(f"key column(s) {', '.join(missing)} are not columns of {table} (columns: "
                         f"{', '.join(known)}); name declared columns, e.g. key: [{next(iter(example_columns), 'id')}]")
    if len(set(key)) != len(key):
        raise ValueError(f"key {key} of {table} names a column twice")

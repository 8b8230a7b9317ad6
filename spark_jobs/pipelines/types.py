"""Column types of a pipeline entry and what each becomes: a Spark type to parse into, a PostgreSQL type to
store, and the rules it accepts. Pure: no Spark import.

Types: string, int, bigint, double, decimal(p,s), boolean, date, timestamp, json (kept as jsonb), array<T>,
struct<name:T,...>. Arrays and structs are stored as jsonb.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

SCALARS = {
    # name: (Spark type, PostgreSQL type)
    "string": ("string", "text"),
    "int": ("int", "integer"),
    "bigint": ("bigint", "bigint"),
    "double": ("double", "double precision"),
    "boolean": ("boolean", "boolean"),
    "date": ("date", "date"),
    "timestamp": ("timestamp", "timestamptz"),
    "json": ("string", "jsonb"),
}
NUMERIC = {"int", "bigint", "double", "decimal"}
ORDERED = NUMERIC | {"date", "timestamp"}
_SPELLED_OUT = ("decimal", "array", "struct")  # types their name alone does not write
TYPES_HELP = ("string, int, bigint, double, decimal(p,s), boolean, date, timestamp, json, array<T> or "
              "struct<name:T,...>")


class TypeSyntaxError(ValueError):
    """A type the grammar does not know; the message says which part and lists the types."""


@dataclass(frozen=True)
class ColumnType:
    name: str  # string, int, ..., decimal, array, struct
    precision: int = 0
    scale: int = 0
    element: ColumnType | None = None  # array<element>
    fields: tuple[tuple[str, ColumnType], ...] = ()  # struct<name:type,...>

    @property
    def spark(self) -> str:
        """The Spark SQL type to parse into (DDL form)."""
        return self._spelled(lambda t: t.spark, "`") if self.name in _SPELLED_OUT else SCALARS[self.name][0]

    @property
    def postgres(self) -> str:
        """The PostgreSQL column type: decimal(12,2) is numeric(12,2), timestamp is timestamptz, nested is jsonb."""
        if self.name == "decimal":
            return f"numeric({self.precision},{self.scale})"
        if self.name in ("array", "struct"):
            return "jsonb"
        return SCALARS[self.name][1]

    @property
    def nested(self) -> bool:
        return self.name in ("array", "struct", "json")

    def __str__(self) -> str:
        return self._spelled(str, "") if self.name in _SPELLED_OUT else self.name

    def _spelled(self, inner: Callable[[ColumnType], str], quote: str) -> str:
        """A decimal, array or struct type written out: its element's and fields' types by `inner`, each field's
        name between `quote`s."""
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "array":
            return f"array<{inner(self.element)}>"
        return "struct<" + ",".join(f"{quote}{n}{quote}:{inner(t)}" for n, t in self.fields) + ">"


_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_type(raw: str) -> ColumnType:
    """`decimal(12,2)`, `array<string>`, `struct<id:bigint,country:string>` ... into a ColumnType."""
    text = (raw or "").strip()
    out, rest = _parse(text, raw)
    if rest.strip():
        raise TypeSyntaxError(f"type {raw!r} has {rest.strip()!r} left over; use {TYPES_HELP}")
    return out


def _parse(text: str, raw: str) -> tuple[ColumnType, str]:
    text = text.lstrip()
    low = text.lower()
    m = _DECIMAL.match(low)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise TypeSyntaxError(f"type {raw!r}: decimal(p,s) needs 1 <= p <= 38 and s <= p")
        return ColumnType("decimal", precision, scale), text[m.end():]
    if low.startswith("array<"):
        element, rest = _parse(text[len("array<"):], raw)
        if not rest.lstrip().startswith(">"):
            raise TypeSyntaxError(f"type {raw!r}: array<...> is not closed with '>'")
        return ColumnType("array", element=element), rest.lstrip()[1:]
    if low.startswith("struct<"):
        rest = text[len("struct<"):]
        fields: list[tuple[str, ColumnType]] = []
        while True:
            rest = rest.lstrip()
            name = _NAME.match(rest)
            if not name or not rest[name.end():].lstrip().startswith(":"):
                raise TypeSyntaxError(f"type {raw!r}: struct fields are name:type, e.g. "
                                      "struct<id:bigint,country:string>")
            field_type, rest = _parse(rest[name.end():].lstrip()[1:], raw)
            if name.group(0) in dict(fields):
                raise TypeSyntaxError(f"type {raw!r}: struct field {name.group(0)!r} appears twice")
            fields.append((name.group(0), field_type))
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.startswith(">"):
                return ColumnType("struct", fields=tuple(fields)), rest[1:]
            raise TypeSyntaxError(f"type {raw!r}: struct<...> is not closed with '>'")
    name = re.match(r"[a-z]+", low)
    if name and name.group(0) in SCALARS:
        return ColumnType(name.group(0)), text[name.end():]
    word = name.group(0) if name else text[:12]
    raise TypeSyntaxError(f"type {raw!r}: {word!r} is not a type; use {TYPES_HELP}")

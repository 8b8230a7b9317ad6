"""One topic into several tables (docs/pipelines.md, "Routes"): an entry's `route:` sends each record to the
table its field's value names, each table with its own columns, rules, key and mode.

    route:
      field: event_type
      tables:
        order: orders                                  # the entry's columns, key and mode
        refund: {table: refunds, columns: {...}, key: [refund_id], mode: replace}
      unmatched: dead_letters                          # or a table: it takes the entry's columns, key and mode

The parse emits every table's columns once (a name two tables use has one type) and `_route`, the table a record
goes to; a record is checked against its table's columns only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from streamfill.connectors.postgres.sink_options import SinkMode
from streamfill.names import parse_table
from streamfill.rules import Rule
from streamfill.spark_jobs.pipelines.columns import (
    COLUMN_NAME,
    COORDINATES,
    FIELD_PATH,
    RESERVED,
    ColumnSpec,
    check_column_names,
    check_key,
)

DEAD_LETTERS = "dead_letters"  # `unmatched:` default: a record no table takes is a dead letter


def _table_name(name: str) -> str:
    parse_table(name, "table")
    return name


class RoutedTable(BaseModel):
    """A table of `route.tables`; what it leaves out it takes from the entry (a plain name leaves out all)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str = Field(min_length=1)
    columns: dict[str, ColumnSpec] | None = None
    derived: dict[str, str] | None = None
    key: list[str] | None = Field(None, min_length=1)
    mode: SinkMode | None = None

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        return _table_name(v)

    @field_validator("columns")
    @classmethod
    def _column_names(cls, v: dict[str, ColumnSpec] | None) -> dict[str, ColumnSpec] | None:
        if v is not None:
            check_column_names(v)
        return v


class Route(BaseModel):
    """`route:` of an entry: the field whose value picks the table, the tables by value, and where the records
    whose value no table lists go."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    tables: dict[str, RoutedTable] = Field(min_length=1)
    unmatched: str = DEAD_LETTERS

    @field_validator("field")
    @classmethod
    def _path(cls, v: str) -> str:
        if not FIELD_PATH.fullmatch(v):
            raise ValueError(f"route field {v!r} is not a path into the value; use names joined by dots, e.g. "
                             "field: event_type")
        return v

    @field_validator("tables", mode="before")
    @classmethod
    def _values_as_text(cls, v: Any) -> Any:
        """The field's value is compared as the JSON text Spark reads (7, true), so YAML's numbers and booleans
        as keys are that text too; a table given by its name alone is the object naming it."""
        if not isinstance(v, Mapping):
            return v
        return {(str(k).lower() if isinstance(k, bool) else str(k)): {"table": t} if isinstance(t, str) else t
                for k, t in v.items()}

    @field_validator("unmatched")
    @classmethod
    def _unmatched(cls, v: str) -> str:
        return v if v == DEAD_LETTERS else _table_name(v)

    def target(self, value: str) -> str:
        """The table name the records of `value` go to."""
        return self.tables[value].table


@dataclass(frozen=True)
class RouteTable:
    """One table of a routed entry as the sink writes it: the route field's `value` that picks it (None: the
    unmatched records' table), its columns, derived columns, key and mode."""

    value: str | None
    table: str
    columns: Mapping[str, ColumnSpec]
    derived: Mapping[str, str]
    key: list[str]
    mode: str

    def table_columns(self) -> list[str]:
        """Every column of the table, in order: Kafka's coordinates, its columns, its derived columns."""
        return [*COORDINATES, *self.columns, *self.derived]

    def rules(self, column: str) -> tuple[Rule, ...]:
        """The rules of one of its columns, required if it is part of its key."""
        return self.columns[column].rules(key=column in self.key)


@dataclass(frozen=True)
class EntryDefaults:
    """What a table of the route takes from its entry when it does not say."""

    columns: Mapping[str, ColumnSpec]
    derived: Mapping[str, str]
    key: list[str]
    mode: str


def tables_of(route: Route, entry: EntryDefaults) -> list[RouteTable]:
    """The route's tables, one per value in the entry's order, then the unmatched records' table when it is
    none of them."""
    out = []
    for value, given in route.tables.items():
        out.append(RouteTable(
            value=value, table=given.table,
            columns=entry.columns if given.columns is None else given.columns,
            derived=entry.derived if given.derived is None else given.derived,
            key=list(entry.key if given.key is None else given.key), mode=given.mode or entry.mode))
    if route.unmatched != DEAD_LETTERS and route.unmatched not in {t.table for t in out}:
        out.append(RouteTable(value=None, table=route.unmatched, columns=entry.columns, derived=entry.derived,
                              key=list(entry.key), mode=entry.mode))
    return out


def uses_entry_columns(route: Route, table: RouteTable) -> bool:
    """The table takes the entry's columns (a plain name, an object without columns, or the unmatched table)."""
    return table.value is None or route.tables[table.value].columns is None


def check(route: Route, tables: list[RouteTable], entry_columns_pending: bool) -> None:
    """The tables fit together: one definition per table name, one type per column name, derived names that
    are no column's, and keys of their own table's columns. `entry_columns_pending`: the entry's columns come
    from a registry at launch, so the keys of the tables that take them are checked then. ValueError naming
    the tables and the fix."""
    by_table: dict[str, RouteTable] = {}
    for t in tables:
        first = by_table.setdefault(t.table, t)
        if (first.columns, first.derived, first.key, first.mode) != (t.columns, t.derived, t.key, t.mode):
            raise ValueError(f"route values {first.value} and {t.value} both write table {t.table} with different "
                             "columns, derived, key or mode; give the table one definition (the same object or "
                             "the plain name under both)")
    types: dict[str, tuple[str, str]] = {}  # column -> (type, the first table that has it)
    for t in tables:
        if not t.columns and uses_entry_columns(route, t) and not entry_columns_pending:
            raise ValueError(f"route table {t.table} takes the entry's columns, and the entry declares none; give "
                             f"columns: at the entry, or the table as {{table: {t.table}, columns: {{...}}}}")
        for name, c in t.columns.items():
            seen = types.setdefault(name, (str(c.column_type), t.table))
            if seen[0] != str(c.column_type):
                raise ValueError(f"column {name} is {seen[0]} in table {seen[1]} but {c.column_type} in table "
                                 f"{t.table}; a column the parse gives several tables has one type: give both the "
                                 "same type, or the columns different names")
    for t in tables:
        for name in t.derived:
            if not COLUMN_NAME.fullmatch(name):
                raise ValueError(f"derived column name {name!r} of table {t.table} is not valid; use letters, "
                                 "digits and _")
            if name in types or name in RESERVED:
                raise ValueError(f"derived column {name} of table {t.table} is also a column; give it another name")
        if entry_columns_pending and uses_entry_columns(route, t):
            continue
        check_key(t.key, t.table_columns(), f"route table {t.table}", t.columns)


def union_columns(tables: list[RouteTable]) -> dict[str, ColumnSpec]:
    """Every column of the tables once, in the order they first appear (check: a name has one type)."""
    out: dict[str, ColumnSpec] = {}
    for t in tables:
        for name, c in t.columns.items():
            out.setdefault(name, c)
    return out


def union_derived(tables: list[RouteTable]) -> list[str]:
    """Every derived column name of the tables once, in the order they first appear."""
    return list(dict.fromkeys(name for t in tables for name in t.derived))

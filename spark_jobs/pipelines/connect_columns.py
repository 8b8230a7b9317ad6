"""An existing table a Kafka Connect sink wrote, as an entry would declare its columns (`jobs from-connect
--columns-from-table`): each column's entry type is the one whose PostgreSQL type is the column's own, so the sink
takes the table as it is. A column no entry type writes unchanged (Connect's `timestamp` without a zone, `smallint`,
`numeric` without a precision) is named with the ALTER TABLE that makes it one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamfill.connectors.postgres.column_types import normal_type
from streamfill.spark_jobs.pipelines.types import SCALARS

_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")
# the PostgreSQL types of an entry's scalar types, and one more a string column writes into unchanged
_ENTRY_TYPE = {**{normal_type(pg): name for name, (_, pg) in SCALARS.items()}, "varchar": "string"}
# what to do with a column of a type no entry type writes unchanged: its ALTER TABLE's new type and USING clause
_ALTERS = {"timestamp": ("timestamptz", " USING {column} AT TIME ZONE 'UTC'"), "smallint": ("integer", ""),
           "real": ("double precision", ""), "json": ("jsonb", ""), "numeric": ("numeric(38,10)", ""),
           "character varying": ("text", ""), "character": ("text", "")}


@dataclass(frozen=True)
class TableColumn:
    name: str
    pg_type: str  # as format_type() writes it
    not_null: bool

    @property
    def entry_type(self) -> str | None:
        """The entry's type that writes this column's type unchanged; None when none does."""
        normal = normal_type(self.pg_type)
        numeric = _NUMERIC.fullmatch(normal)
        if numeric:
            return f"decimal({numeric[1]},{numeric[2]})"
        return _ENTRY_TYPE.get(normal)

    def fix(self, table: str) -> str:
        """How to make the column one an entry declares: an ALTER TABLE where one fits, else by hand."""
        normal = normal_type(self.pg_type)
        new, using = _ALTERS.get(normal.split("(")[0], (None, ""))
        if new is None:
            return (f"no entry type writes {self.pg_type}; write the entry's columns by hand without {self.name} "
                    "(the sink leaves a column it does not write as it is), or change the column's type")
        quoted, column = ".".join(f'"{part}"' for part in table.split(".")), f'"{self.name}"'
        return (f"ALTER TABLE {quoted} ALTER COLUMN {column} TYPE {new}{using.format(column=column)}"
                + (" (choose the precision and scale the values need)" if normal == "numeric" else "")
                + ", then run from-connect again")


@dataclass(frozen=True)
class ExistingTable:
    """A table's columns in order and its primary key, as PostgreSQL's catalog has them."""

    table: str
    columns: tuple[TableColumn, ...]
    primary_key: tuple[str, ...]


def read_table(url: str, table: str) -> ExistingTable | None:
    """The table's columns and primary key in the database at `url`; None when there is no such table."""
    from streamfill.connectors.postgres import connection, pool
    from streamfill.connectors.postgres.target import schema_or_current
    from streamfill.names import parse_table

    schema, name = parse_table(table)
    conn = connection.connect(url)
    try:
        with conn.cursor() as cur:
            schema = schema_or_current(cur, schema)
            cur.execute("""
                SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull
                FROM pg_attribute a
                JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY a.attnum""", (schema, name))
            columns = tuple(TableColumn(*row) for row in cur.fetchall())
            if not columns:
                return None
            cur.execute("""
                SELECT a.attname::text
                FROM pg_index i
                JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                WHERE n.nspname = %s AND c.relname = %s AND i.indisprimary
                ORDER BY array_position(i.indkey::int2[], a.attnum)""", (schema, name))
            key = tuple(r[0] for r in cur.fetchall())
        conn.rollback()
    finally:
        pool.release(conn)
    return ExistingTable(table, columns, key)


def with_registry_columns(body: dict, job: str) -> dict:
    """An entry's settings with the columns of its registry subject's latest version written out (for a Debezium
    entry, of its `after` record), so later versions change nothing until the entry does."""
    from streamfill.spark_jobs.pipelines import registry
    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

    resolved = registry.resolved(PipelineSpec(name=job, **body))
    columns = {name: c.model_dump(by_alias=True, exclude_defaults=True) for name, c in resolved.columns.items()}
    ordered = {}
    for key, value in body.items():
        if key == "table":
            ordered["columns"] = columns
        ordered[key] = value
    return ordered

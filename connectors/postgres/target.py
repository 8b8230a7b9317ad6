"""The sink's target table as a value (its schema, name, written columns and key) and what PostgreSQL's catalog
says of it: its schema and its existing columns. offsets_db's tables are never named here."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg2 import sql

from streamfill.errors import SinkError


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # a type name from the fixed mapping of the Spark layer or a checked columnTypes entry
    staged: str = ""  # the type binary COPY writes (its Arrow type's); the move casts when it differs

    @property
    def stage_type(self) -> str:
        return self.staged or self.pg_type


@dataclass(frozen=True)
class Target:
    schema: str
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.table)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def schema_or_current(cur, schema: str | None) -> str:
    """The schema a table name gave, or the one an unqualified name resolves to: search_path's first, passing
    over offsets_db's own (which a role named like it finds first, through "$user")."""
    if schema is not None:
        return schema
    from streamfill.offsets_db import schema as offsets_db

    cur.execute("SELECT s FROM unnest(current_schemas(false)) s WHERE s <> %s LIMIT 1", (offsets_db.name(),))
    found = cur.fetchone()
    if found is None:
        raise SinkError(f"no schema of this role's search_path but offsets_db's ({offsets_db.name()}) exists to "
                        "hold the table: name it as schema.table, or SET search_path for the role")
    return found[0]


def existing_columns(cur, schema: str, table: str) -> dict[str, str]:
    """Column name -> type of an existing table, in order (empty when the table does not exist)."""
    cur.execute("""
        SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum""", (schema, table))
    return dict(cur.fetchall())


def check_schema(cur, schema: str, table: str) -> None:
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    if cur.fetchone() is None:
        raise SinkError(f"table {schema}.{table}: schema {schema} does not exist. Create it "
                        f"(CREATE SCHEMA {sql.Identifier(schema).as_string(cur)}) or name a table in an existing "
                        "schema")

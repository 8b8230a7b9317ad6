"""The sink's tables in Postgres: the target (created from the DataFrame's columns or checked when it
exists), its staging table, and the one statement that moves staged rows in. Identifiers are always quoted
with psycopg2.sql; values are always bound parameters."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg2 import sql
from psycopg2.extensions import connection as PgConnection

MODES = ("append-new", "replace")
DEFAULT_KEY = ("topic", "partition", "offset")


class SinkError(ValueError):
    """A sink option or the target table does not fit; raised on the driver before any row moves."""


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # a type name from the fixed mapping of the Spark layer, never user text


@dataclass(frozen=True)
class Target:
    schema: str
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    stage: str  # the staging table's name, in the target's schema

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.table)

    @property
    def stage_ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.stage)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def parse_table(raw: str | None) -> tuple[str | None, str]:
    """`table` or `schema.table`; quoting happens later, so any name Postgres allows is fine."""
    if raw is None or not raw.strip():
        raise SinkError("option table is required: name the target table, e.g. .option('table', 'orders')")
    parts = raw.strip().split(".")
    if len(parts) > 2 or any(not p or len(p) > 63 for p in parts):
        raise SinkError(f"option table={raw!r} is not a table name: use 'table' or 'schema.table', "
                        "each part 1 to 63 characters")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def parse_key(raw: str | None, columns: Sequence[str]) -> tuple[str, ...]:
    key = tuple(c.strip() for c in raw.split(",") if c.strip()) if raw else DEFAULT_KEY
    missing = [c for c in key if c not in columns]
    if missing:
        if raw:
            raise SinkError(f"option keyColumns={raw!r}: column(s) {', '.join(missing)} are not in the DataFrame "
                            f"(columns: {', '.join(columns)}). Name columns that exist")
        raise SinkError(f"the DataFrame has no {', '.join(missing)} column(s) for the default unique key "
                        "(topic, partition, offset). Keep those columns or set keyColumns, e.g. "
                        ".option('keyColumns', 'event_id')")
    return key


def parse_mode(raw: str | None) -> str:
    mode = (raw or "append-new").strip().lower()
    if mode not in MODES:
        raise SinkError(f"option mode={raw!r} is not a sink mode: use append-new (keep rows whose key exists) "
                        "or replace (upsert)")
    return mode


def stage_name(schema: str, table: str, owner: str) -> str:
    """One staging table per (target, job); a job writes its batches one after another."""
    digest = hashlib.sha1(f"{schema}.{table}|{owner}".encode()).hexdigest()[:16]
    return f"_sf_stage_{table[:30]}_{digest}"


def prepare(conn: PgConnection, schema: str | None, table: str, columns: Sequence[Column], key: Sequence[str],
            owner: str) -> Target:
    """Create the target when missing, check it when it exists, and create its staging table."""
    with conn.cursor() as cur:
        if schema is None:
            cur.execute("SELECT current_schema()")
            schema = cur.fetchone()[0]
        target = Target(schema, table, tuple(columns), tuple(key), stage_name(schema, table, owner))
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (schema, table))
        existing = {r[0] for r in cur.fetchall()}
        if not existing:
            cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, UNIQUE ({}))").format(
                target.ident,
                sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type))
                                   for c in columns),
                sql.SQL(", ").join(map(sql.Identifier, key))))
        else:
            _check_existing(cur, target, existing)
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} AS SELECT {}, ''::text AS _sf_write_id "
                            "FROM {} WITH NO DATA").format(
            target.stage_ident, sql.SQL(", ").join(map(sql.Identifier, target.names)), target.ident))
    conn.commit()
    return target


def _check_existing(cur, target: Target, existing: set[str]) -> None:
    missing = [c for c in target.names if c not in existing]
    if missing:
        raise SinkError(f"table {target.schema}.{target.table} has no column(s) {', '.join(missing)} that the "
                        "DataFrame writes. Add them (ALTER TABLE ... ADD COLUMN) or select only existing columns")
    cur.execute("""
        SELECT array_agg(a.attname::text ORDER BY a.attname)
        FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL
        GROUP BY i.indexrelid""", (target.ident.as_string(cur),))
    if sorted(target.key) not in [sorted(r[0]) for r in cur.fetchall()]:
        raise SinkError(
            f"table {target.schema}.{target.table} has no unique index on ({', '.join(target.key)}), which the "
            "sink needs to keep each record once. Create one: CREATE UNIQUE INDEX ON "
            f"{target.ident.as_string(cur)} ({sql.SQL(', ').join(map(sql.Identifier, target.key)).as_string(cur)}), "
            "or set keyColumns to the "
            "columns of an existing unique index")


def move(cur, target: Target, write_ids: Sequence[str], mode: str) -> int:
    """Staged rows of these writes into the target in one statement; returns rows inserted or replaced."""
    cols = sql.SQL(", ").join(map(sql.Identifier, target.names))
    key = sql.SQL(", ").join(map(sql.Identifier, target.key))
    others = [c for c in target.names if c not in target.key]
    if mode == "replace" and others:
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others))
    else:
        action = sql.SQL("DO NOTHING")
    cur.execute(sql.SQL("INSERT INTO {t} ({cols}) SELECT DISTINCT ON ({key}) {cols} FROM {s} "
                        "WHERE _sf_write_id = ANY(%s) ORDER BY {key} ON CONFLICT ({key}) {action}").format(
        t=target.ident, s=target.stage_ident, cols=cols, key=key, action=action), (list(write_ids),))
    return cur.rowcount


def discard(cur, target: Target, write_ids: Sequence[str] | None = None) -> None:
    """Remove staged rows: the named writes, or every staged row of this (target, job)."""
    if write_ids is None:
        cur.execute(sql.SQL("DELETE FROM {}").format(target.stage_ident))
    else:
        cur.execute(sql.SQL("DELETE FROM {} WHERE _sf_write_id = ANY(%s)").format(target.stage_ident),
                    (list(write_ids),))


def drop_stage(cur, target: Target) -> None:
    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target.stage_ident))

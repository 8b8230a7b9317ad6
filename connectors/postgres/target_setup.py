"""The sink's target table made ready before anything is read: created from the DataFrame's columns when missing,
else checked (and, for a pipeline entry, evolved). An existing table is the user's: it is never restructured
beyond what a pipeline entry asks. Identifiers are always quoted with psycopg2.sql; values are always bound
parameters."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg2 import sql
from psycopg2.extensions import connection as PgConnection

from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.table_checks import check_existing
from streamfill.connectors.postgres.target import (
    Column,
    Target,
    check_schema,
    existing_columns,
    schema_or_current,
)

# types whose values have one width: an index compares them without walking the tuple
_FIXED_WIDTH = {"smallint", "integer", "bigint", "real", "double precision", "boolean", "date", "timestamp",
                "timestamptz"}


def index_order(target: Target) -> list[str]:
    """The key's columns as the unique index of a table the sink creates lists them: fixed-width ones first.
    Uniqueness and ON CONFLICT do not depend on the order, and each insert's comparisons then seldom reach a
    text column (PostgreSQL compares index columns after a text one by walking the tuple)."""
    types = {c.name: normal_type(c.pg_type) for c in target.columns}
    return sorted(target.key, key=lambda k: types.get(k) not in _FIXED_WIDTH)


CREATE_LOCK_SPACE = 0x5F14  # advisory-lock key space of the sink creating a table: (space, hash of its name)


def prepare(conn: PgConnection, schema: str | None, table: str, columns: Sequence[Column], key: Sequence[str],
            evolve: bool = False, change: bool = True) -> Target:
    """Create the target when missing (a plain table with a unique key) and check it when it exists.

    An existing table must have every written column, each of a type that holds every value written
    (`holds_every_value`), and a unique index on the key; it may be partitioned any way that routes every row (a
    default partition), and carry triggers, publications and indexes of its own, which the commit's INSERT serves
    like any other. A mismatch would otherwise fail at COPY or at commit, after retries: errors give the statement
    to run (`table_checks`). With `evolve` (a table a pipeline entry manages) a column it lacks is added, nullable,
    a column whose type the written one safely widens is widened (`widening`; one that rewrites a table above
    REWRITE_LIMIT is refused), both waiting for readers rather than queueing them (`table_evolution`), and columns
    it has that are not written are reported and left.
    With `change` False nothing is created or added, only checked: a launch checks the table before it takes
    its job, and changes it once it holds the job, so a launch refused as busy has changed nothing."""
    with conn.cursor() as cur:
        if schema is not None:
            check_schema(cur, schema, table)
        schema = schema_or_current(cur, schema)
        target = Target(schema, table, tuple(columns), tuple(key))
        existing = existing_columns(cur, schema, table)
        if not existing and not change:
            return target
        if not existing:
            # two launches creating one table at once (a stream and a backfill into it, say) take turns: the
            # later one checks what the first created, where CREATE TABLE IF NOT EXISTS would fail on pg_type
            cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (CREATE_LOCK_SPACE, f"{schema}.{table}"))
            existing = existing_columns(cur, schema, table)
        if not existing:
            definition = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type))
                                            for c in columns)
            cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, UNIQUE ({}))").format(
                target.ident, definition, sql.SQL(", ").join(map(sql.Identifier, index_order(target)))))
        else:
            check_existing(cur, target, existing, evolve, change)
    conn.commit()
    return target

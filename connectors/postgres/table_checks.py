"""An existing target table checked before anything is read: whatever of it would make a commit fail batches
later (a column type that cannot hold the written one, no unique key, an insert it refuses, a row no partition
takes) is refused now, with the reason and the statement that fixes it."""

from __future__ import annotations

import logging

from psycopg2 import sql

from streamfill.connectors.postgres.column_types import holds_every_value, normal_type
from streamfill.connectors.postgres.table_evolution import check_rewrite, evolve_columns
from streamfill.connectors.postgres.target import Target
from streamfill.connectors.postgres.widening import widening
from streamfill.errors import SinkError

log = logging.getLogger("streamfill.postgres_target")


def check_existing(cur, target: Target, existing: dict[str, str], evolve: bool, change: bool) -> None:
    name = f"{target.schema}.{target.table}"
    table = target.ident.as_string(cur)
    differ = [(c, existing[c.name]) for c in target.columns
              if c.name in existing and not holds_every_value(existing[c.name], c.pg_type)]
    widened = {c.name: found for c, have in differ if evolve
               for found in [widening(normal_type(have), normal_type(c.pg_type))] if found is not None}
    refused = [(c, have) for c, have in differ if c.name not in widened]
    if refused:
        alter = ", ".join(f"ALTER COLUMN {col} TYPE {c.pg_type} USING {col}::{c.pg_type}"
                          for c, _ in refused for col in [sql.Identifier(c.name).as_string(cur)])
        raise SinkError(
            f"table {name} has " + "; ".join(f"column {c.name} of type {have}, but it is written as {c.pg_type}"
                                             for c, have in refused)
            + f" (a column must hold every value of its written type). Change the column(s): ALTER TABLE {table} "
            f"{alter}; or write into a new table, which the sink creates with the written types")
    missing = [c for c in target.columns if c.name not in existing]
    if missing and not evolve:
        add = ", ".join(f"ADD COLUMN {sql.Identifier(c.name).as_string(cur)} {c.pg_type}" for c in missing)
        raise SinkError(f"table {name} has no column(s) {', '.join(c.name for c in missing)} that the "
                        f"DataFrame writes. Add them (ALTER TABLE {table} {add}) or select only existing columns")
    _check_unique_key(cur, target)
    _check_insertable(cur, target)
    _check_partitions(cur, target)
    widen = [(c, widened[c.name]) for c in target.columns if c.name in widened]
    check_rewrite(cur, target, widen)
    if change:
        evolve_columns(cur, target, missing, widen)
    if evolve:
        left = [col for col in existing if col not in target.names]
        if left:
            log.warning("table %s: column(s) %s are no longer written and are left as they are", name,
                        ", ".join(left))


def _check_unique_key(cur, target: Target) -> None:
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
            "or set keyColumns to the columns of an existing unique index")


def _check_insertable(cur, target: Target) -> None:
    """What would make every commit's INSERT fail: a column it does not write that may not be null and has no
    default, a written column PostgreSQL generates itself, and rules on INSERT or UPDATE (with which PostgreSQL
    refuses INSERT ... ON CONFLICT, the commit's statement when keys exist)."""
    name, table = f"{target.schema}.{target.table}", target.ident.as_string(cur)
    cur.execute("""
        SELECT a.attname::text, a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '',
               a.attgenerated <> '' OR a.attidentity = 'a'
        FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped""",
                (table,))
    columns = cur.fetchall()
    unset = [c for c, required, _ in columns if required and c not in target.names]
    if unset:
        fix = "; ".join(f"ALTER TABLE {table} ALTER COLUMN {sql.Identifier(c).as_string(cur)} DROP NOT NULL"
                        for c in unset)
        raise SinkError(f"table {name}: column(s) {', '.join(unset)} may not be null and have no default, but the "
                        f"sink does not write them, so every insert would fail. Give them a default or drop the "
                        f"constraint ({fix}), or write those columns")
    generated = [c for c, _, always in columns if always and c in target.names]
    if generated:
        raise SinkError(f"table {name}: column(s) {', '.join(generated)} are generated by PostgreSQL (GENERATED "
                        "ALWAYS), so the sink cannot write them. Leave them out of the DataFrame, or write into "
                        "another column")
    rules = _names(cur, "SELECT rulename::text FROM pg_rewrite WHERE ev_class = to_regclass(%s) "
                        "AND ev_type IN ('2', '3')", target)
    if rules:
        drop = "; ".join(f"DROP RULE {sql.Identifier(r).as_string(cur)} ON {table}" for r in rules)
        raise SinkError(f"table {name} has rule(s) {', '.join(rules)} on INSERT or UPDATE, and PostgreSQL refuses "
                        "INSERT ... ON CONFLICT on such a table (the commit's statement whenever keys exist). "
                        f"A trigger does what a rule does and works with it: replace the rule ({drop})")


def _check_partitions(cur, target: Target) -> None:
    """A partitioned table (the user's own) takes the rows as any INSERT does, as long as every row has a
    partition to go to: each partitioned table of the tree needs a default partition, or a row of a topic, a
    day or a key no partition was made for would fail its whole batch."""
    lacking = _names(cur, """
        SELECT t.relid::regclass::text
        FROM pg_partition_tree(to_regclass(%s)) t JOIN pg_partitioned_table p ON p.partrelid = t.relid
        WHERE p.partdefid = 0""", target)
    if lacking:
        fix = "; ".join(f"CREATE TABLE {_suffixed(cur, t)} PARTITION OF {t} DEFAULT" for t in lacking)
        raise SinkError(f"table {target.schema}.{target.table} is partitioned, and {', '.join(lacking)} has no "
                        "default partition: a row no partition takes would fail its whole batch. Add one "
                        f"({fix}); rows go to the partitions that take them as with any INSERT")


def _names(cur, query: str, target: Target) -> list[str]:
    """The names (first column) of what `query` finds of the target, which it takes as its one parameter."""
    cur.execute(query, (target.ident.as_string(cur),))
    return [r[0] for r in cur.fetchall()]


def _suffixed(cur, regclass_text: str) -> str:
    """A name for the default partition of a table named as regclass prints it (schema-qualified when needed)."""
    cur.execute("SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = %s::regclass", (regclass_text,))
    schema, name = cur.fetchone()
    return sql.Identifier(schema, f"{name[:55]}_default").as_string(cur)

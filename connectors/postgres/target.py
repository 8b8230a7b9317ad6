"""The sink's target table: created from the DataFrame's columns, or checked when it exists, before anything is
read. An existing table is the user's: it is never restructured beyond what a pipeline entry asks (a column
added, a type safely widened), and whatever of it would make a commit fail batches later is refused now, with the
reason and the statement that fixes it. Identifiers are always quoted with psycopg2.sql; values are always bound
parameters. offsets_db's tables are never named here."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql
from psycopg2.extensions import connection as PgConnection

from streamfill.connectors.postgres.widening import Widening, widening
from streamfill.offsets_db.locks import SHORT_TRY, table_holders, wait_for_lock
from streamfill.errors import SinkError

log = logging.getLogger("streamfill.postgres_target")


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


def prepare(conn: PgConnection, schema: str | None, table: str, columns: Sequence[Column], key: Sequence[str],
            evolve: bool = False, change: bool = True) -> Target:
    """Create the target when missing (a plain table with a unique key) and check it when it exists.

    An existing table must have every written column, each of a type that `holds` what is written, and a unique
    index on the key; it may be partitioned any way that routes every row (a default partition), and carry
    triggers, publications and indexes of its own, which the commit's INSERT serves like any other. A mismatch
    would otherwise fail at COPY or at commit, after retries: errors give the statement to run. With `evolve`
    (a table a pipeline entry manages) a column it lacks is added, nullable, a column whose type the written one
    safely widens is widened (`widening`; one that rewrites a table above REWRITE_LIMIT is refused), both waiting
    for readers rather than queueing them (`offsets_db.locks`), and columns it has that are not written are
    reported and left.
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
            _check_existing(cur, target, existing, evolve, change)
    conn.commit()
    return target


# format_type() spells some types out; the sink's own names are the short ones
_TYPE_NAMES = {"timestamp with time zone": "timestamptz", "timestamp without time zone": "timestamp",
               "timestamp(6) with time zone": "timestamptz", "timestamp(6) without time zone": "timestamp",
               "character varying": "varchar"}


def normal_type(pg_type: str) -> str:
    """`numeric(12, 2)` and `numeric(12,2)`, `timestamptz` and `timestamp with time zone` compare equal."""
    text = " ".join(pg_type.lower().replace(", ", ",").split())
    return _TYPE_NAMES.get(text, text)


# Besides its own type, the column types that store every value of a type the sink writes unchanged. COPY
# accepts more, but rounds (numeric(p,s) of a smaller scale, real, timestamp(3)) or refuses only the values
# that do not fit (integer, varchar(n), numeric(p,s) of fewer digits), on an executor in the middle of a batch.
_WIDER = {"smallint": {"integer", "bigint", "real", "double precision"}, "integer": {"bigint", "double precision"},
          "real": {"double precision"}, "text": {"varchar"}}
_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}  # digits of each integer type's largest value
_NUMERIC = re.compile(r"numeric(?:\((\d+),(\d+)\))?")


def holds(existing: str, written: str) -> bool:
    """Whether a column of type `existing` stores every value the sink writes as `written`, unchanged."""
    have, want = normal_type(existing), normal_type(written)
    if have == want or have in _WIDER.get(want, ()):
        return True
    room, value = _NUMERIC.fullmatch(have), _NUMERIC.fullmatch(want)
    if room is None or not (want in _DIGITS or (value and value[1])):
        return False
    if room[1] is None:  # numeric without a precision: any number
        return True
    whole, scale = int(room[1]) - int(room[2]), int(room[2])
    if want in _DIGITS:
        return whole >= _DIGITS[want]
    return whole >= int(value[1]) - int(value[2]) and scale >= int(value[2])


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


# the largest table (heap, indexes and TOAST, every partition) the sink rewrites itself to widen a column: every
# reader of the table waits for the whole rewrite, so a larger one is refused, with the statement to run at a quiet
# time (docs/benchmarks.md has the rewrite's measured speed)
REWRITE_LIMIT = 32 * 2**20


def _check_existing(cur, target: Target, existing: dict[str, str], evolve: bool, change: bool) -> None:
    name = f"{target.schema}.{target.table}"
    table = target.ident.as_string(cur)
    differ = [(c, existing[c.name]) for c in target.columns
              if c.name in existing and not holds(existing[c.name], c.pg_type)]
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
    _check_rewrite(cur, target, widen)
    if change:
        _evolve(cur, target, missing, widen)
    if evolve:
        left = [col for col in existing if col not in target.names]
        if left:
            log.warning("table %s: column(s) %s are no longer written and are left as they are", name,
                        ", ".join(left))


def _widen_sql(cur, widen: list[tuple[Column, Widening]]) -> list[str]:
    return [f"ALTER COLUMN {sql.Identifier(c.name).as_string(cur)} TYPE {c.pg_type}" for c, _ in widen]


def _check_rewrite(cur, target: Target, widen: list[tuple[Column, Widening]]) -> None:
    """A widening that rewrites the table holds every reader of it for the whole rewrite: refused above
    REWRITE_LIMIT, naming the statement to run at a quiet time."""
    rewriting = [(c, w) for c, w in widen if w.rewrite]
    if not rewriting:
        return
    # a partitioned table's size is its partitions' (pg_partition_tree lists none of a plain table)
    cur.execute("SELECT pg_total_relation_size(t) + coalesce((SELECT sum(pg_total_relation_size(p.relid)) "
                "FROM pg_partition_tree(t) p WHERE p.relid <> t), 0) FROM to_regclass(%s) t",
                (target.ident.as_string(cur),))
    size = int(cur.fetchone()[0])
    if size <= REWRITE_LIMIT:
        return
    raise SinkError(
        f"table {target.schema}.{target.table}: widening " + ", ".join(f"column {c.name} from {w.have} to {w.want}"
                                                                        for c, w in rewriting)
        + f" rewrites the whole table ({size / 2**20:,.0f} MB, more than the {REWRITE_LIMIT / 2**20:.0f} MB the sink "
        "rewrites itself), and every reader of the table would wait for the rewrite. Run it at a quiet time: "
        f"ALTER TABLE {target.ident.as_string(cur)} {', '.join(_widen_sql(cur, widen))}; then launch again")


def _evolve(cur, target: Target, missing: list[Column], widen: list[tuple[Column, Widening]]) -> None:
    """The columns widened and added by one ALTER TABLE (one lock, one rewrite at most), asked for in short tries:
    ACCESS EXCLUSIVE conflicts with every reader, and each one that comes while it is queued waits behind it."""
    if not missing and not widen:
        return
    name = f"{target.schema}.{target.table}"
    actions = _widen_sql(cur, widen) + [f"ADD COLUMN IF NOT EXISTS {sql.Identifier(c.name).as_string(cur)} "
                                        f"{c.pg_type}" for c in missing]
    statement = f"ALTER TABLE {target.ident.as_string(cur)} {', '.join(actions)}"
    what = ", ".join([f"widening column {c.name}" for c, _ in widen] + [f"adding column {c.name}" for c in missing])
    try:
        wait_for_lock(cur, statement, what=f"table {name}: {what}",
                      holders=table_holders(target.schema, target.table, "ACCESS EXCLUSIVE"), attempt=SHORT_TRY)
    except psycopg2.Error as exc:
        # what depends on the column (a view, a rule) refuses the change; the whole statement is undone
        cur.connection.rollback()
        reason = " ".join(str(exc).split())
        raise SinkError(f"table {name}: {statement} failed, so nothing of it was changed: {reason}. Change what "
                        "the error names, or run the statement yourself at a quiet time, then launch again") from None
    for c, w in widen:
        log.warning("table %s: column %s widened from %s to %s%s", name, c.name, w.have, c.pg_type,
                    " (the table was rewritten)" if w.rewrite else "")
    for c in missing:
        log.warning("table %s: column %s %s added (rows written before have it null)", name, c.name, c.pg_type)


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
    cur.execute("SELECT rulename::text FROM pg_rewrite WHERE ev_class = to_regclass(%s) AND ev_type IN ('2', '3')",
                (table,))
    rules = [r[0] for r in cur.fetchall()]
    if rules:
        drop = "; ".join(f"DROP RULE {sql.Identifier(r).as_string(cur)} ON {table}" for r in rules)
        raise SinkError(f"table {name} has rule(s) {', '.join(rules)} on INSERT or UPDATE, and PostgreSQL refuses "
                        "INSERT ... ON CONFLICT on such a table (the commit's statement whenever keys exist). "
                        f"A trigger does what a rule does and works with it: replace the rule ({drop})")


def _check_partitions(cur, target: Target) -> None:
    """A partitioned table (the user's own) takes the rows as any INSERT does, as long as every row has a
    partition to go to: each partitioned table of the tree needs a default partition, or a row of a topic, a
    day or a key no partition was made for would fail its whole batch."""
    cur.execute("""
        SELECT t.relid::regclass::text
        FROM pg_partition_tree(to_regclass(%s)) t JOIN pg_partitioned_table p ON p.partrelid = t.relid
        WHERE p.partdefid = 0""", (target.ident.as_string(cur),))
    lacking = [r[0] for r in cur.fetchall()]
    if lacking:
        fix = "; ".join(f"CREATE TABLE {_suffixed(cur, t)} PARTITION OF {t} DEFAULT" for t in lacking)
        raise SinkError(f"table {target.schema}.{target.table} is partitioned, and {', '.join(lacking)} has no "
                        "default partition: a row no partition takes would fail its whole batch. Add one "
                        f"({fix}); rows go to the partitions that take them as with any INSERT")


def _suffixed(cur, regclass_text: str) -> str:
    """A name for the default partition of a table named as regclass prints it (schema-qualified when needed)."""
    cur.execute("SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = %s::regclass", (regclass_text,))
    schema, name = cur.fetchone()
    return sql.Identifier(schema, f"{name[:55]}_default").as_string(cur)

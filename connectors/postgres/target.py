"""The sink's tables in Postgres: the target (created from the DataFrame's columns or checked when it
exists), its staging table, and the statements that move staged rows in and drop them. Identifiers are
always quoted with psycopg2.sql; values are always bound parameters. offsets_db's tables are never named
here: the exactly-once protocol (`offsets_db.exactly_once`) moves dead letters and offsets."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg2.errors
from psycopg2 import sql
from psycopg2.extensions import connection as PgConnection

from connectors.postgres import partitions
from connectors.postgres.partitions import PART_PREFIX
from streamfill.errors import OptionError, SinkError

log = logging.getLogger("streamfill.postgres_target")

MODES = ("append-new", "replace")
DEFAULT_KEY = ("topic", "partition", "offset")
# with dead letters on, these columns are staged but never reach the target: a non-null _error makes the row
# a dead letter (offsets_db.dead_letters) carrying _raw, the record's original value
DEAD_LETTER_COLUMNS = (("_error", "text"), ("_raw", "bytea"))


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
    stage: str  # the staging table's name, in the target's schema
    dead_letters: bool = False
    partitioned: bool = False  # partitioned by (topic, partition, offset): valid rows are published by attaching

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.table)

    @property
    def stage_ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.stage)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def staged_names(self) -> list[str]:
        return self.names + ([n for n, _ in DEAD_LETTER_COLUMNS] if self.dead_letters else [])


def parse_key(raw: str | None, columns: Sequence[str]) -> tuple[str, ...]:
    key = tuple(c.strip() for c in raw.split(",") if c.strip()) if raw else DEFAULT_KEY
    missing = [c for c in key if c not in columns]
    if missing:
        if raw:
            raise OptionError("keyColumns", raw, f"column(s) {', '.join(missing)} are not in the DataFrame "
                              f"(columns: {', '.join(columns)})", "Name columns that exist")
        raise OptionError("keyColumns", raw, f"the DataFrame has no {', '.join(missing)} column(s) for the default "
                          "unique key (topic, partition, offset)",
                          "Keep those columns or set keyColumns, e.g. .option('keyColumns', 'event_id')")
    return key


def parse_mode(raw: str | None) -> str:
    mode = (raw or "append-new").strip().lower()
    if mode not in MODES:
        raise OptionError("mode", raw, "is not a sink mode",
                          "Use append-new (keep rows whose key exists) or replace (upsert)")
    return mode


def stage_name(schema: str, table: str, owner: str, shape: str = "") -> str:
    """One staging table per (target, owner, column shape): a stream's job writes its batches one after
    another into one; a single write (a backfill chunk, a df.write) has one of its own."""
    digest = hashlib.sha1(f"{schema}.{table}|{owner}|{shape}".encode()).hexdigest()[:16]
    return f"{STAGE_PREFIX}{table[:30]}_{digest}"


def schema_or_current(cur, schema: str | None) -> str:
    """The schema a table name gave, or the one an unqualified name resolves to (search_path's first)."""
    if schema is not None:
        return schema
    cur.execute("SELECT current_schema()")
    return cur.fetchone()[0]


def prepare(conn: PgConnection, schema: str | None, table: str, columns: Sequence[Column], key: Sequence[str],
            owner: str, dead_letters: bool = False, evolve: bool = False, partition: bool = False) -> Target:
    """Create the target when missing and check it when it exists (`create_stage` makes its staging table).

    An existing table must have every written column, each of a type that `holds` what is written: a mismatch
    would otherwise fail at COPY on the executors, after retries. Errors give the statement to run. With
    `partition` a table created here with the default key is partitioned (`partitions`); an existing table is
    never restructured, and is published into by attaching only when it is partitioned that way. With `evolve`
    (a table a pipeline entry manages) a column it lacks is added, nullable, and columns it has that are not
    written are reported in the log and left as they are."""
    with conn.cursor() as cur:
        if schema is not None:
            _check_schema(cur, schema, table)
        schema = schema_or_current(cur, schema)
        shape = ",".join(f"{c.name}:{c.pg_type}:{c.stage_type}" for c in columns) + ("|dead-letters" if dead_letters else "")
        target = Target(schema, table, tuple(columns), tuple(key), stage_name(schema, table, owner, shape),
                        dead_letters)
        existing = existing_columns(cur, schema, table)
        definition = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type))
                                        for c in columns)
        attachable = partition and tuple(key) == DEFAULT_KEY and all(
            normal_type(c.stage_type) == normal_type(c.pg_type) == normal_type(existing.get(c.name, c.pg_type))
            for c in columns)
        if not existing and attachable:
            partitions.create_partitioned(cur, schema, table, definition)
        elif not existing:
            cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, UNIQUE ({}))").format(
                target.ident, definition, sql.SQL(", ").join(map(sql.Identifier, key))))
        else:
            _check_existing(cur, target, existing, evolve)
        if attachable and partitions.is_partitioned(cur, schema, table):
            target = dataclasses.replace(target, partitioned=True)
    conn.commit()
    return target


STAGE_PREFIX = "_sf_stage_"


def create_stage(conn: PgConnection, target: Target, kind: str, sweep_after_s: float) -> None:
    """The target's staging table, UNLOGGED for speed: a crash empties it, and the commit's count of staged rows
    catches that. Its columns have the types binary COPY writes (`Column.stage_type`). Its comment says whose it is and since when, so stages of writes whose driver died (kind
    `write`, older than `sweep_after_s`) are dropped here, by the next write into the same schema."""
    columns = [(c.name, c.stage_type) for c in target.columns]
    columns += [*(DEAD_LETTER_COLUMNS if target.dead_letters else ()), ("_sf_write_id", "text")]
    with conn.cursor() as cur:
        sweep_orphans(cur, target.schema, sweep_after_s)
        staged = existing_columns(cur, target.schema, target.stage)
        if staged and [(n, normal_type(t)) for n, t in staged.items()] != [(n, normal_type(t)) for n, t in columns]:
            # a stage made by an older version (it copied the table's types) is replaced
            cur.execute(sql.SQL("DROP TABLE {}").format(target.stage_ident))
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})").format(
            target.stage_ident, sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
                                                   for n, t in columns)))
        cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(target.stage_ident, sql.Literal(json.dumps(
            {"streamfill_stage": kind, "target": f"{target.schema}.{target.table}", "created": time.time()}))))
    conn.commit()


def sweep_orphans(cur, schema: str, older_than_s: float) -> list[str]:
    """Drop staging tables of single writes and unattached partition tables (kind `write`) created more than
    `older_than_s` ago: their driver died before it could drop them. A partition is never touched. A table another session still uses is left for the next sweep."""
    cur.execute("""
        SELECT c.relname::text, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relkind = 'r' AND NOT c.relispartition
          AND (c.relname LIKE %s OR c.relname LIKE %s)""",
                (schema, STAGE_PREFIX.replace("_", r"\_") + "%", PART_PREFIX.replace("_", r"\_") + "%"))
    dropped = []
    for name, comment in cur.fetchall():
        try:
            about = json.loads(comment or "{}")
        except ValueError:
            continue
        if about.get("streamfill_stage") != "write" or time.time() - float(about.get("created", 0)) < older_than_s:
            continue
        cur.execute("SAVEPOINT sf_sweep")
        try:
            cur.execute("SET LOCAL lock_timeout = '1s'")
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
            cur.execute("RELEASE SAVEPOINT sf_sweep")
            dropped.append(name)
        except psycopg2.errors.LockNotAvailable:
            cur.execute("ROLLBACK TO SAVEPOINT sf_sweep")
    if dropped:
        log.warning("schema %s: dropped %d staging table(s) of writes whose driver died: %s", schema, len(dropped),
                    ", ".join(dropped))
    return dropped


def count_staged(cur, target: Target, write_ids: Sequence[str]) -> int:
    """Rows staged under these writes (valid rows and dead letters alike)."""
    cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE _sf_write_id = ANY(%s)").format(target.stage_ident),
                (list(write_ids),))
    return cur.fetchone()[0]


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


def _check_schema(cur, schema: str, table: str) -> None:
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    if cur.fetchone() is None:
        raise SinkError(f"table {schema}.{table}: schema {schema} does not exist. Create it "
                        f"(CREATE SCHEMA {sql.Identifier(schema).as_string(cur)}) or name a table in an existing "
                        "schema")


def _check_existing(cur, target: Target, existing: dict[str, str], evolve: bool) -> None:
    name = f"{target.schema}.{target.table}"
    table = target.ident.as_string(cur)
    differ = [(c, existing[c.name]) for c in target.columns
              if c.name in existing and not holds(existing[c.name], c.pg_type)]
    if differ:
        alter = ", ".join(f"ALTER COLUMN {col} TYPE {c.pg_type} USING {col}::{c.pg_type}"
                          for c, _ in differ for col in [sql.Identifier(c.name).as_string(cur)])
        raise SinkError(
            f"table {name} has " + "; ".join(f"column {c.name} of type {have}, but it is written as {c.pg_type}"
                                             for c, have in differ)
            + f" (a column must hold every value of its written type). Change the column(s): ALTER TABLE {table} "
            f"{alter}; or write into a new table, which the sink creates with the written types")
    missing = [c for c in target.columns if c.name not in existing]
    if missing and not evolve:
        add = ", ".join(f"ADD COLUMN {sql.Identifier(c.name).as_string(cur)} {c.pg_type}" for c in missing)
        raise SinkError(f"table {name} has no column(s) {', '.join(c.name for c in missing)} that the "
                        f"DataFrame writes. Add them (ALTER TABLE {table} {add}) or select only existing columns")
    for c in missing:
        cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
            target.ident, sql.Identifier(c.name), sql.SQL(c.pg_type)))
        log.warning("table %s: column %s %s added (rows written before have it null)", name, c.name, c.pg_type)
    if evolve:
        left = [col for col in existing if col not in target.names]
        if left:
            log.warning("table %s: column(s) %s are no longer written and are left as they are", name,
                        ", ".join(left))
    cur.execute("""
        SELECT array_agg(a.attname::text ORDER BY a.attname)
        FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL
        GROUP BY i.indexrelid""", (target.ident.as_string(cur),))
    if sorted(target.key) not in [sorted(r[0]) for r in cur.fetchall()]:
        raise SinkError(
            f"table {name} has no unique index on ({', '.join(target.key)}), which the "
            "sink needs to keep each record once. Create one: CREATE UNIQUE INDEX ON "
            f"{target.ident.as_string(cur)} ({sql.SQL(', ').join(map(sql.Identifier, target.key)).as_string(cur)}), "
            "or set keyColumns to the columns of an existing unique index")


def move(cur, target: Target, write_ids: Sequence[str], mode: str) -> int:
    """Staged rows of these writes into the target; returns rows inserted or replaced.

    First a plain INSERT under a savepoint: when no key exists yet (the common case) it skips the per-row
    conflict check of ON CONFLICT (about 40% of the move's time). A unique violation (keys already there,
    duplicates in the batch, or a concurrent writer of the same keys) rolls back to the savepoint and the
    conflict-aware statement of the mode runs instead."""
    cols = sql.SQL(", ").join(map(sql.Identifier, target.names))
    staged = sql.SQL(", ").join(
        sql.SQL("CAST({0} AS {1}) AS {0}").format(sql.Identifier(c.name), sql.SQL(c.pg_type))
        if normal_type(c.stage_type) != normal_type(c.pg_type) else sql.Identifier(c.name) for c in target.columns)
    key = sql.SQL(", ").join(map(sql.Identifier, target.key))
    valid = sql.SQL(" AND _error IS NULL" if target.dead_letters else "")
    source = sql.SQL("SELECT {distinct}{cols} FROM {s} WHERE _sf_write_id = ANY(%s){valid}{order}")
    params = (list(write_ids),)
    cur.execute("SAVEPOINT sf_move")
    try:
        cur.execute(sql.SQL("INSERT INTO {t} ({cols}) ").format(t=target.ident, cols=cols) + source.format(
            distinct=sql.SQL(""), cols=staged, s=target.stage_ident, valid=valid, order=sql.SQL("")), params)
        moved = cur.rowcount
        cur.execute("RELEASE SAVEPOINT sf_move")
        return moved
    except psycopg2.errors.UniqueViolation:
        cur.execute("ROLLBACK TO SAVEPOINT sf_move")
    others = [c for c in target.names if c not in target.key]
    if mode == "replace" and others:
        # an upsert may not touch one row twice: one staged row per key, the one with the highest offset; and
        # a row already there is replaced only by a record at or after its offset (records of one key share a
        # partition, so a replayed old range never overwrites a newer version)
        newest = "offset" in target.names and "offset" not in target.key
        action = sql.SQL("DO UPDATE SET {}{}").format(sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others),
            sql.SQL(' WHERE t."offset" <= EXCLUDED."offset"') if newest else sql.SQL(""))
        order = sql.SQL(' ORDER BY {}, "offset" DESC').format(key) if newest else sql.SQL(" ORDER BY {}").format(key)
        pick = (sql.SQL("DISTINCT ON ({}) ").format(key), order)
    else:
        action, pick = sql.SQL("DO NOTHING"), (sql.SQL(""), sql.SQL(""))
    cur.execute(sql.SQL("INSERT INTO {t} AS t ({cols}) ").format(t=target.ident, cols=cols) + source.format(
        distinct=pick[0], cols=staged, s=target.stage_ident, valid=valid, order=pick[1])
        + sql.SQL(" ON CONFLICT ({key}) {action}").format(key=key, action=action), params)
    return cur.rowcount


def discard(cur, target: Target, write_ids: Sequence[str] | None = None) -> None:
    """Remove staged rows: the named writes, or every staged row of this (target, job)."""
    if write_ids is None:
        # TRUNCATE, not DELETE: a stage of millions of dead rows would slow every later COPY and move. It waits
        # for a straggling task attempt's COPY to finish; batches of one job never overlap otherwise.
        cur.execute(sql.SQL("TRUNCATE {}").format(target.stage_ident))
    else:
        cur.execute(sql.SQL("DELETE FROM {} WHERE _sf_write_id = ANY(%s)").format(target.stage_ident),
                    (list(write_ids),))


def drop_stage(cur, target: Target) -> None:
    cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target.stage_ident))

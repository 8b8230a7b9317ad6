"""The deleted keys of a table a sink deletes from (`deleted_keys`): what the commit's move adds to its statements.

A delete is recorded with the version of the record that made it, the newest per key kept; an upsert of the key
lands only when its version is newer than that, exactly as it lands only over an older row. So the key's row
depends only on its records, never on the order ranges are read, replayed or committed in. The statements are
composed here, offsets_db being the one place that names its tables; the move binds them into its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from psycopg2 import sql

from streamfill.changes import SOURCE_POSITION
from streamfill.offsets_db import schema

# the version columns of deleted_keys, in the order of the longest version order (the sink's VERSION_ORDERS);
# a shorter order (no source position) is matched to its last columns
VERSION_COLUMNS = (SOURCE_POSITION, "kafka_timestamp", "topic", "partition", "offset")

# the target's name is composed as sql.Literal, psycopg2's quoting of a value: the statements are composed once per
# write and their parameters are positional in the move's several shapes of statement
Ranked = Callable[[sql.Composable, Sequence[str]], sql.Composable]  # (alias, its version columns) -> the rank


def _ident() -> sql.Composable:
    return sql.Identifier(schema.name(), "deleted_keys")


def version_columns(version: Sequence[str]) -> tuple[str, ...]:
    return VERSION_COLUMNS[len(VERSION_COLUMNS) - len(version):]


def newer_delete(target: str, key: Sequence[sql.Composable], row_rank: sql.Composable, version: Sequence[str],
                 ranked: Ranked) -> sql.Composable:
    """A condition true when a delete of the row's key (its `key` expressions) is at least as new as the row."""
    return sql.SQL("EXISTS (SELECT FROM {t} AS d WHERE d.target = {name} AND d.key = jsonb_build_array({k}) "
                   "AND ({d}) >= ({r}))").format(
        t=_ident(), name=sql.Literal(target), k=sql.SQL(", ").join(key),
        d=ranked(sql.SQL("d"), version_columns(version)), r=row_rank)


def record(target: str, doomed: str, key: Sequence[sql.Composable], version: Sequence[str], ranked: Ranked,
           job_id: sql.Composable) -> sql.Composable:
    """A data-modifying CTE body: each key of the relation `doomed` (its `key` expressions and version columns)
    recorded as deleted, unless a newer delete of it is there already."""
    mine = version_columns(version)
    return sql.SQL("INSERT INTO {t} AS d (target, key, {cols}, job_id) SELECT {name}, jsonb_build_array({k}), {vals}, "
                   "{job} FROM {doomed} ON CONFLICT (target, key) DO UPDATE SET {sets}, job_id = EXCLUDED.job_id, "
                   "deleted_at = now() WHERE ({old}) < ({new})").format(
        t=_ident(), cols=sql.SQL(", ").join(map(sql.Identifier, mine)), name=sql.Literal(target),
        k=sql.SQL(", ").join(key), vals=sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(doomed),
                                                                                    sql.Identifier(v))
                                                             for v in version),
        job=job_id, doomed=sql.Identifier(doomed),
        sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in mine),
        old=ranked(sql.SQL("d"), mine), new=ranked(sql.SQL("EXCLUDED"), mine))


def job_id(job: str | None) -> sql.Composable:
    """The job's id, looked up in the statement that records its deletes (NULL without a job)."""
    if job is None:
        return sql.SQL("NULL::integer")
    return sql.SQL("(SELECT id FROM {} WHERE name = {})").format(sql.Identifier(schema.name(), "jobs"),
                                                                 sql.Literal(job))



DELETES_LOCK_SPACE = 0x5F15  # advisory-lock key space of deleting commits: (space, hash of the table's name)


def serialize(cur, target: str) -> None:
    """Deleting commits into one table, one at a time until each transaction ends: a commit that reads the
    deleted keys then sees every delete another committed, where two at once could each miss the other's (an
    older upsert landing after a concurrent delete of its key)."""
    cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (DELETES_LOCK_SPACE, target))


def any_recorded(cur, target: str) -> bool:
    """Whether a delete of the table is recorded: without one, and without deletes in the batch, a deleting write
    moves its rows as a plain upsert does."""
    cur.execute(sql.SQL("SELECT EXISTS (SELECT FROM {} WHERE target = %s)").format(_ident()), (target,))
    return bool(cur.fetchone()[0])

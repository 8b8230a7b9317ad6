"""Inside the commit's transaction: a batch's staged rows into the target, by INSERT, as any writer of the table.

The target is the user's table (the contract is in docs/guarantees.md, "The table is yours"). So the rows arrive the way
any application's rows would: an INSERT takes ROW EXCLUSIVE, which no reader conflicts with, and it fires the
table's triggers, feeds its publications and maintains its indexes. Nothing is copied outside the transaction
that moves it, so a user's DELETE or UPDATE, or another job's rows, can never be lost or reverted.

- The lock is taken first, waiting politely (`offsets_db.locks`): a colleague's CREATE INDEX or ALTER TABLE
  delays the commit, never fails it.
- A plain INSERT runs first, under a savepoint: when no key exists yet (the common case) it skips the per-row
  conflict check of ON CONFLICT. A unique violation rolls back to the savepoint and the mode's statement runs:
  `append-new` keeps the row whose key exists, `replace` keeps the newest version of each key
  (`sink_options.VERSION_ORDERS`, in SQL `versions`).
- A row the table refuses (a CHECK, a foreign key or a unique index of the user's, a trigger that raises) would
  fail the whole statement. The statement is then run again over halves of the stage's pages until the rows it
  refuses are found one by one; those become dead letters with PostgreSQL's reason, and every other row lands.
  A write without dead letters has nowhere to keep such a row, so its commit fails instead, naming the row, the
  constraint and the reason: an offset is never committed past a record that is neither a row nor a dead letter.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg2
from psycopg2 import sql

from streamfill.connectors.postgres import recorded_deletes
from streamfill.connectors.postgres.copy import WRITE_ID
from streamfill.connectors.postgres.move_statements import MoveStatements
from streamfill.connectors.postgres.stage import Stage
from streamfill.connectors.postgres.target import Target
from streamfill.errors import SinkError
from streamfill.offsets_db import deleted_keys
from streamfill.offsets_db.locks import table_holders, wait_for_lock

log = logging.getLogger("streamfill.postgres_move")

# what one row can cause: a data exception, an integrity violation, a trigger's RAISE EXCEPTION
ROW_ERROR_CLASSES = ("22", "23")
RAISED_BY_TRIGGER = "P0001"
REFUSED = "the table refused the row: "  # how a refused row's dead letter reason begins


@dataclass(frozen=True)
class Moved:
    rows: int  # rows inserted or replaced
    refused: int  # rows the table refused: dead letters now
    whole: bool  # the plain INSERT took every valid staged row it was told of: the stage was not emptied
    deleted: int = 0  # rows a staged delete removed


@dataclass(frozen=True)
class Refusal:
    """Why the table refused one row: PostgreSQL's message and, when it names one, the constraint."""

    reason: str
    constraint: str | None = None


def lock(cur, target: Target) -> float:
    """The commit's lock on the target, ROW EXCLUSIVE, waited for as long as a conflicting holder keeps it;
    returns the seconds waited."""
    return wait_for_lock(cur, sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(target.ident),
                         what=f"commit into {target.schema}.{target.table}",
                         holders=table_holders(target.schema, target.table, "ROW EXCLUSIVE"))


def move(cur, target: Target, stage: Stage, write_ids: Sequence[str], mode: str, version: Sequence[str],
         valid_rows: int, deletes: bool = False, job: str | None = None, staged_deletes: int = 0,
         guarded: bool = False) -> Moved:
    """Move the valid staged rows of these writes into the target (lock it first); `valid_rows` is how many
    the tasks staged. With `deletes`, staged deletes (`staged_deletes` of the rows) remove their keys' rows
    first (their keys recorded), and no upsert lands over a newer recorded delete; without, a `guarded` write
    (into a database that keeps deleted keys) is refused when a delete of the table is recorded."""
    name = f"{target.schema}.{target.table}"
    if deletes:
        deleted_keys.serialize(cur, name)
        deletes = bool(staged_deletes) or deleted_keys.any_recorded(cur, name)
    elif guarded:
        recorded_deletes.check_commit(cur, name)
    statement = MoveStatements(target, stage, mode, tuple(version), deletes, job)
    params = (list(write_ids),)
    deleted = 0
    if statement.deleting is not None:
        cur.execute(statement.deleting, params)
        deleted = cur.rowcount
        return _merge(cur, statement, params, target, stage, deleted)
    cur.execute("SAVEPOINT sf_move")
    try:
        cur.execute(statement.plain, params)
        moved = cur.rowcount
        cur.execute("RELEASE SAVEPOINT sf_move")
        return Moved(moved, 0, whole=moved == valid_rows)
    except psycopg2.errors.UniqueViolation:
        cur.execute("ROLLBACK TO SAVEPOINT sf_move")
    except psycopg2.Error as exc:
        if not _row_error(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT sf_move")
    return _merge(cur, statement, params, target, stage)


def _merge(cur, statement: MoveStatements, params: tuple, target: Target, stage: Stage, deleted: int = 0) -> Moved:
    """The mode's statement over every staged row; on a row error, over parts of the stage (`_isolate`)."""
    cur.execute("SAVEPOINT sf_move")
    try:
        cur.execute(statement.merging(), params)
        moved = cur.rowcount
        cur.execute("RELEASE SAVEPOINT sf_move")
        return Moved(moved, 0, whole=False, deleted=deleted)
    except psycopg2.errors.CardinalityViolation:
        raise SinkError(f"{target.schema}.{target.table}: rows of one write share a key ({', '.join(target.key)}) "
                        "in mode replace, and nothing orders them (no Kafka timestamp, topic, partition and offset "
                        "columns). Write each key once per write, or keep those columns") from None
    except psycopg2.Error as exc:
        if not _row_error(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT sf_move")
    moved = _isolate(cur, statement, params, target, stage)
    return Moved(moved.rows, moved.refused, whole=False, deleted=deleted)


def _row_error(exc: psycopg2.Error) -> bool:
    code = exc.pgcode or ""
    return code[:2] in ROW_ERROR_CLASSES or code == RAISED_BY_TRIGGER


def _isolate(cur, statement: MoveStatements, params: tuple, target: Target, stage: Stage) -> Moved:
    """Run the merging statement over halves of the stage's pages, then row by row within a page that fails,
    so only the rows the table refuses are left out; each becomes a dead letter with PostgreSQL's reason."""
    cur.execute("SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int + 1",
                (stage.ident.as_string(cur),))
    pages = cur.fetchone()[0]
    between = sql.SQL(" AND {0} >= %s::tid AND {0} < %s::tid").format(statement.place)
    moved, refused = 0, []
    pending = [(0, pages)]
    while pending:
        low, high = pending.pop()
        done = _attempt(cur, statement.merging(between), (*params, f"({low},0)", f"({high},0)"))
        if isinstance(done, int):
            moved += done
            continue
        if high - low > 1:
            middle = (low + high) // 2
            pending.extend([(middle, high), (low, middle)])
            continue
        cur.execute(statement.places(between), (*params, f"({low},0)", f"({high},0)"))
        for (tid,) in cur.fetchall():
            one = _attempt(cur, statement.merging(sql.SQL(" AND {} = %s::tid").format(statement.place)),
                           (*params, tid))
            if isinstance(one, int):
                moved += one
            elif not stage.dead_letters:  # the first such row fails the commit: nothing else is looked for
                raise SinkError(_nowhere(cur, target, stage, tid, one))
            else:
                refused.append((tid, one))
    name = f"{target.schema}.{target.table}"
    for tid, why in refused:
        cur.execute(sql.SQL('INSERT INTO {d} (topic, "partition", "offset", _error, _raw, {w}) SELECT topic, '
                            '"partition", "offset", %s, convert_to((to_jsonb(s) - %s)::text, \'UTF8\'), {w} '
                            "FROM {s} AS s WHERE ctid = %s::tid").format(
            d=stage.dead_ident, s=stage.ident, w=sql.Identifier(WRITE_ID)), (REFUSED + why.reason, WRITE_ID, tid))
    if refused:
        log.warning("%s: the table refused %d row(s), kept as dead letters; the first: %s", name, len(refused),
                    refused[0][1].reason)
    return Moved(moved, len(refused), whole=False)


def _nowhere(cur, target: Target, stage: Stage, tid: str, why: Refusal) -> str:
    """The error of a write that cannot keep a row the table refused (no dead letters): which row (its Kafka
    coordinates where it has them, else its key), the constraint, PostgreSQL's reason and what to do."""
    shown = [c for c in ("topic", "partition", "offset") if c in target.names] or list(target.key)
    cur.execute(sql.SQL("SELECT {} FROM {} WHERE ctid = %s::tid").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in shown), stage.ident), (tid,))
    found = cur.fetchone() or [None] * len(shown)
    row = ", ".join(f"{c} {v}" for c, v in zip(shown, found, strict=True))
    constraint = f" by constraint {why.constraint}" if why.constraint else ""
    return (f"{target.schema}.{target.table} refused the row at {row}{constraint}: {why.reason}. Without dead "
            "letters the row can be kept nowhere, so nothing of this batch is committed and it fails. Fix the row "
            "at its source or relax the constraint, or write with dead letters on (deadLetters=true, a pipeline's "
            "dead_letters: true) to keep such rows in offsets_db.dead_letters")


def _attempt(cur, statement: sql.Composable, params: tuple) -> int | Refusal:
    """The rows the statement moved, or why a row error stopped it (rolled back)."""
    cur.execute("SAVEPOINT sf_piece")
    try:
        cur.execute(statement, params)
        moved = cur.rowcount
        cur.execute("RELEASE SAVEPOINT sf_piece")
        return moved
    except psycopg2.Error as exc:
        if not _row_error(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT sf_piece")
        detail = getattr(exc.diag, "message_detail", None)
        return Refusal((exc.diag.message_primary or str(exc).strip()) + (f" ({detail})" if detail else ""),
                       exc.diag.constraint_name)

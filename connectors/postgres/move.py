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
  (`sink_options.VERSION_ORDERS`).
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

from streamfill.connectors.postgres.copy import WRITE_ID
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.connectors.postgres.stage import Stage
from streamfill.changes import DELETE_COLUMN
from streamfill.connectors.postgres.target import Target, normal_type
from streamfill.offsets_db import deleted_keys
from streamfill.offsets_db.locks import table_holders, wait_for_lock
from streamfill.errors import SinkError

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
         valid_rows: int, deletes: bool = False, job: str | None = None, staged_deletes: int = 0) -> Moved:
    """Move the valid staged rows of these writes into the target (lock it first); `valid_rows` is how many
    the tasks staged. With `deletes`, staged deletes (`staged_deletes` of the rows) remove their keys' rows
    first (their keys recorded), and no upsert lands over a newer recorded delete."""
    if deletes:
        name = f"{target.schema}.{target.table}"
        deleted_keys.serialize(cur, name)
        deletes = bool(staged_deletes) or deleted_keys.any_recorded(cur, name)
    statement = _Statements(target, stage, mode, tuple(version), deletes, job)
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


def _merge(cur, statement: _Statements, params: tuple, target: Target, stage: Stage, deleted: int = 0) -> Moved:
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


def _lowest(pg_type: str) -> sql.Composable | None:
    """A literal of a version column's type standing in for its NULL, so two versions without a timestamp (or a
    source position) compare by what follows (the `IS NOT NULL` before it already ranks one without a value
    below one with); None for a type with no such literal."""
    kind = normal_type(pg_type)
    if kind in ("timestamp", "timestamptz", "date"):
        return sql.SQL("'-infinity'")
    if kind.startswith("numeric"):  # any constant will do: it only ever meets itself
        return sql.SQL("0")
    if kind in ("smallint", "integer", "bigint", "real", "double precision"):
        return sql.SQL("'-infinity'::double precision")
    if kind == "text" or kind.startswith("varchar"):
        return sql.SQL("''")
    return None


def _row_error(exc: psycopg2.Error) -> bool:
    code = exc.pgcode or ""
    return code[:2] in ROW_ERROR_CLASSES or code == RAISED_BY_TRIGGER


class _Statements:
    """The move's statements over the stage: two INSERTs, each with an optional extra condition on the stage's
    rows, and (for a write that deletes) the DELETE of the keys whose newest staged record is a delete."""

    def __init__(self, target: Target, stage: Stage, mode: str, version: tuple[str, ...], deletes: bool = False,
                 job: str | None = None) -> None:
        self._into = sql.SQL("INSERT INTO {} AS t ({}) ").format(
            target.ident, sql.SQL(", ").join(map(sql.Identifier, target.names)))
        self._columns = sql.SQL(", ").join(_typed(c, sql.Identifier(c.name)) + sql.SQL(" AS {}").format(
            sql.Identifier(c.name)) if _cast(c) else sql.Identifier(c.name) for c in target.columns)
        self._rows = sql.SQL("FROM {} WHERE {} = ANY(%s)").format(stage.ident, sql.Identifier(WRITE_ID))
        key = sql.SQL(", ").join(map(sql.Identifier, target.key))
        others = [c for c in target.names if c not in target.key]
        self._distinct, self._order, self._kept = sql.SQL(""), sql.SQL(""), sql.SQL("")
        self.winners: sql.Composable | None = None  # replace: only rows no staged row of their key is newer than
        self.deleting: sql.Composable | None = None  # deletes: the DELETE (and record) of deleted keys
        self.deletes = deletes
        if mode == REPLACE and (others or deletes):
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)) if others \
                else sql.SQL("DO NOTHING")
            if version:
                # one staged row per key, its newest version; a row already there is replaced by a version at
                # least as new (the same record read again rewrites its row), or when it has no version. A
                # record without a Kafka timestamp is older than any with one (VERSION_ORDERS), in both places
                types = {c.name: c.pg_type for c in target.columns}

                def ranked(side: sql.Composable, columns: Sequence[str] = version) -> sql.Composable:
                    return _ranked(side, columns, [types.get(v, "") for v in version])

                if others:
                    action += sql.SQL(" WHERE ({}) <= ({}) IS NOT FALSE").format(ranked(sql.SQL("t")),
                                                                                 ranked(sql.SQL("EXCLUDED")))
                # the move of a part of the stage (finding refused rows) takes only each key's newest staged
                # version, as the whole move does: which version lands never depends on where rows lie
                outer = sql.Identifier(stage.name)
                self.winners = sql.SQL(" AND NOT EXISTS (SELECT FROM {s} AS n WHERE n.{w} = ANY(%s) "
                                       "AND ({nk}) = ({ok}) AND ({nv}) > ({ov}))").format(
                    s=stage.ident, w=sql.Identifier(WRITE_ID),
                    nk=sql.SQL(", ").join(sql.SQL("n.{}").format(sql.Identifier(k)) for k in target.key),
                    ok=sql.SQL(", ").join(sql.SQL("{}.{}").format(outer, sql.Identifier(k)) for k in target.key),
                    nv=ranked(sql.SQL("n")), ov=ranked(outer))
                self._distinct = sql.SQL("DISTINCT ON ({}) ").format(key)
                self._order = sql.SQL(" ORDER BY {}, {}").format(key, sql.SQL(", ").join(
                    sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(v)) for v in version))
                if deletes:
                    self._deleting(target, stage, version, ranked, job)
        else:
            action = sql.SQL("DO NOTHING")
        self._conflict = sql.SQL(" ON CONFLICT ({}) {}").format(key, action)

    def _deleting(self, target: Target, stage: Stage, version: tuple[str, ...], ranked, job: str | None) -> None:
        """The statements of a write that deletes. An upsert lands only when no staged delete of its key is newer
        (it is not its key's newest staged record) and no recorded delete is as new; a key whose newest staged
        record is a delete loses its row when that row is older, and is recorded as deleted."""
        name = f"{target.schema}.{target.table}"
        by_name = {c.name: c for c in target.columns}
        delete = sql.Identifier(DELETE_COLUMN)

        def typed_key(side: str) -> list[sql.Composable]:
            return [_typed(by_name[k], sql.SQL("{}.{}").format(sql.Identifier(side), sql.Identifier(k)))
                    for k in target.key]

        def key_of(side: str) -> list[sql.Composable]:
            """The key's values as deleted_keys holds them: a time as UTC, whatever the session's TimeZone."""
            return [sql.SQL("({} AT TIME ZONE 'UTC')").format(v) if normal_type(by_name[k].pg_type) == "timestamptz"
                    else v for k, v in zip(target.key, typed_key(side))]

        # the merging INSERT reads the stage's newest record per key, then keeps the upserts among them
        self._kept = sql.SQL(" AND NOT {}").format(deleted_keys.newer_delete(
            name, key_of("w"), ranked(sql.SQL("w")), version, ranked))
        newest = sql.SQL("SELECT DISTINCT ON ({k}) * FROM {s} WHERE {w} = ANY(%s) AND {present}{o}").format(
            k=sql.SQL(", ").join(map(sql.Identifier, target.key)), s=stage.ident, w=sql.Identifier(WRITE_ID),
            present=sql.SQL(" AND ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier(k)) for k in target.key),
            o=self._order)
        # a _delete left NULL (a DataFrame of the user's) is an upsert, as false is
        self.deleting = sql.SQL("WITH doomed AS (SELECT * FROM ({newest}) AS w WHERE coalesce(w.{delete}, false)), "
                                "recorded AS ({record}) "
                                "DELETE FROM {t} AS t USING doomed WHERE ({tk}) = ({dk}) "
                                "AND ({tv}) <= ({dv}) IS NOT FALSE").format(
            newest=newest, delete=delete,
            record=deleted_keys.record(name, "doomed", key_of("doomed"), version, ranked, deleted_keys.job_id(job)),
            t=target.ident, tk=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in target.key),
            dk=sql.SQL(", ").join(typed_key("doomed")), tv=ranked(sql.SQL("t")), dv=ranked(sql.SQL("doomed")))

    @property
    def plain(self) -> sql.Composable:
        return self._into + sql.SQL("SELECT ") + self._columns + sql.SQL(" ") + self._rows

    def merging(self, extra: sql.Composable = sql.SQL("")) -> sql.Composable:
        if self.deletes:  # the newest staged record of each key, kept when it is an upsert
            return (self._into + sql.SQL("SELECT ") + self._columns + sql.SQL(" FROM (SELECT ") + self._distinct
                    + sql.SQL("* ") + self._rows + extra + self._order
                    + sql.SQL(") AS w WHERE NOT coalesce(w.{}, false)").format(sql.Identifier(DELETE_COLUMN))
                    + self._kept
                    + self._conflict)
        return (self._into + sql.SQL("SELECT ") + self._distinct + self._columns + sql.SQL(" ") + self._rows + extra
                + self._order + self._conflict)


def _cast(c) -> bool:
    return normal_type(c.stage_type) != normal_type(c.pg_type)


def _typed(c, value: sql.Composable) -> sql.Composable:
    """A staged value as the target's column type (binary COPY may stage it as another)."""
    return sql.SQL("CAST({} AS {})").format(value, sql.SQL(c.pg_type)) if _cast(c) else value


def _ranked(side: sql.Composable, columns: Sequence[str], types: Sequence[str]) -> sql.Composable:
    """A version of `side` as a row that compares as VERSION_ORDERS says: each column before the Kafka
    coordinates (a source position, a timestamp) ranks a missing value below every present one."""
    *nullable, topic, partition, offset = columns
    parts: list[sql.Composable] = []
    for column, pg_type in zip(nullable, types):
        at = sql.SQL("{}.{}").format(side, sql.Identifier(column))
        floor = _lowest(pg_type)
        parts += [sql.SQL("{} IS NOT NULL").format(at),
                  sql.SQL("coalesce({}, {})").format(at, floor) if floor is not None else at]
    return sql.SQL(", ").join([*parts, *(sql.SQL("{}.{}").format(side, sql.Identifier(v))
                                         for v in (topic, partition, offset))])


def _isolate(cur, statement: _Statements, params: tuple, target: Target, stage: Stage) -> Moved:
    """Run the merging statement over halves of the stage's pages, then row by row within a page that fails,
    so only the rows the table refuses are left out; each becomes a dead letter with PostgreSQL's reason."""
    cur.execute("SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int + 1",
                (stage.ident.as_string(cur),))
    pages = cur.fetchone()[0]
    winners, params = (sql.SQL(""), params) if statement.winners is None else (statement.winners, (*params, *params))
    between = winners + sql.SQL(" AND ctid >= %s::tid AND ctid < %s::tid")
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
        cur.execute(sql.SQL("SELECT ctid::text FROM {} WHERE {} = ANY(%s){}").format(
            stage.ident, sql.Identifier(WRITE_ID), between), (*params, f"({low},0)", f"({high},0)"))
        for (tid,) in cur.fetchall():
            one = _attempt(cur, statement.merging(winners + sql.SQL(" AND ctid = %s::tid")), (*params, tid))
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
    row = ", ".join(f"{c} {v}" for c, v in zip(shown, found))
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

"""The statements that move a batch's staged rows into the target, as the write's mode asks: a plain INSERT, the
merging INSERT ... ON CONFLICT that keeps each key's newest version, and a deleting write's DELETE of its keys."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg2 import sql

from streamfill.changes import DELETE_COLUMN
from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.copy import WRITE_ID
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.connectors.postgres.stage import Stage
from streamfill.connectors.postgres.target import Target
from streamfill.offsets_db import deleted_keys


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


class MoveStatements:
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
                    else v for k, v in zip(target.key, typed_key(side), strict=True)]

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
    for column, pg_type in zip(nullable, types, strict=False):  # types also holds the coordinates' types
        at = sql.SQL("{}.{}").format(side, sql.Identifier(column))
        floor = _lowest(pg_type)
        parts += [sql.SQL("{} IS NOT NULL").format(at),
                  sql.SQL("coalesce({}, {})").format(at, floor) if floor is not None else at]
    return sql.SQL(", ").join([*parts, *(sql.SQL("{}.{}").format(side, sql.Identifier(v))
                                         for v in (topic, partition, offset))])

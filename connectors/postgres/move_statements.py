"""The statements that move a batch's staged rows into the target, as the write's mode asks: a plain INSERT, the
merging INSERT ... ON CONFLICT that keeps each key's newest version, and a deleting write's DELETE of its keys."""

from __future__ import annotations

from psycopg2 import sql

from streamfill.changes import DELETE_COLUMN
from streamfill.connectors.postgres import versions
from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.copy import WRITE_ID
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.connectors.postgres.stage import Stage
from streamfill.connectors.postgres.target import Target
from streamfill.offsets_db import deleted_keys

NEWEST = sql.Identifier("w")  # each key's newest staged row, as the merging statements read it


class MoveStatements:
    """The move's statements over the stage: the plain INSERT, the merging INSERT (with an optional extra condition
    on the rows it reads, at `place`), and (for a write that deletes) the DELETE of the keys whose newest staged
    record is a delete."""

    def __init__(self, target: Target, stage: Stage, mode: str, version: tuple[str, ...], deletes: bool = False,
                 job: str | None = None) -> None:
        self._into = sql.SQL("INSERT INTO {} AS t ({}) ").format(
            target.ident, sql.SQL(", ").join(map(sql.Identifier, target.names)))
        self._columns = sql.SQL(", ").join(_typed(c, sql.Identifier(c.name)) + sql.SQL(" AS {}").format(
            sql.Identifier(c.name)) if _cast(c) else sql.Identifier(c.name) for c in target.columns)
        self._rows = sql.SQL("FROM {} WHERE {} = ANY(%s)").format(stage.ident, sql.Identifier(WRITE_ID))
        key = sql.SQL(", ").join(map(sql.Identifier, target.key))
        others = [c for c in target.names if c not in target.key]
        self._source = self._rows  # what the merging INSERT selects from: the stage, or each key's newest row
        self._kept = sql.SQL("")
        # where a row of the merging INSERT lies in the stage, for moving a part of it: its ctid, or `_at`
        self.place: sql.Composable = sql.SQL("ctid")
        self.deleting: sql.Composable | None = None  # deletes: the DELETE (and record) of deleted keys
        self.deletes = deletes
        if mode == REPLACE and (others or deletes):
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)) if others \
                else sql.SQL("DO NOTHING")
            if version:
                types = {c.name: c.pg_type for c in target.columns}
                declared = tuple(types.get(v, "") for v in version[:-len(versions.COORDINATES)])

                def side(alias: sql.Composable) -> versions.Side:
                    return versions.Side(alias, tuple(version), declared)

                # a row already there is replaced by a version at least as new (the same record read again
                # rewrites its row); one staged row per key, its newest, whichever part of the stage is moved
                if others:
                    action += sql.SQL(" WHERE {} IS NOT FALSE").format(
                        versions.newer(side(sql.SQL("t")), side(sql.SQL("EXCLUDED"))))
                self._source = sql.SQL("FROM ({}) AS {} WHERE true").format(
                    versions.newest_per_key(self._rows, target.key, version), NEWEST)
                self.place = sql.SQL("{}._at").format(NEWEST)
                if deletes:
                    self._deleting(target, stage, version, side, job)
        else:
            action = sql.SQL("DO NOTHING")
        self._conflict = sql.SQL(" ON CONFLICT ({}) {}").format(key, action)

    def _deleting(self, target: Target, stage: Stage, version: tuple[str, ...], side, job: str | None) -> None:
        """The statements of a write that deletes. An upsert lands only when no staged delete of its key is newer
        (it is not its key's newest staged record) and no recorded delete is as new; a key whose newest staged
        record is a delete loses its row when that row is older, and is recorded as deleted."""
        name = f"{target.schema}.{target.table}"
        by_name = {c.name: c for c in target.columns}
        delete = sql.Identifier(DELETE_COLUMN)

        def typed_key(alias: str) -> list[sql.Composable]:
            return [_typed(by_name[k], sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(k)))
                    for k in target.key]

        def key_of(alias: str) -> list[sql.Composable]:
            """The key's values as deleted_keys holds them: a time as UTC, whatever the session's TimeZone."""
            return [sql.SQL("({} AT TIME ZONE 'UTC')").format(v) if normal_type(by_name[k].pg_type) == "timestamptz"
                    else v for k, v in zip(target.key, typed_key(alias), strict=True)]

        def compare(old: deleted_keys.Side, new: deleted_keys.Side, strict: bool) -> sql.Composable:
            return versions.newer(versions.Side(*old), versions.Side(*new), strict=strict)

        def mine(alias: sql.Composable) -> deleted_keys.Side:
            s = side(alias)
            return s.alias, s.columns, s.types

        # the merging INSERT reads the stage's newest record per key, then keeps the upserts among them
        self._kept = sql.SQL(" AND NOT coalesce({}.{}, false) AND NOT {}").format(
            NEWEST, delete, deleted_keys.newer_delete(name, key_of("w"), mine(NEWEST), version, compare))
        doomed = side(sql.Identifier("doomed"))
        recorded_values = [doomed.at(v) for v in version]
        if len(doomed.declared) > 1:  # a version column: kept as a number
            recorded_values[0] = versions.as_number(recorded_values[0], doomed.types[0])
        present = sql.SQL(" AND ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier(k)) for k in target.key)
        newest = versions.newest_per_key(self._rows + sql.SQL(" AND ") + present, target.key, version)
        # a _delete left NULL (a DataFrame of the user's) is an upsert, as false is
        self.deleting = sql.SQL("WITH doomed AS (SELECT * FROM ({newest}) AS w WHERE coalesce(w.{delete}, false)), "
                                "recorded AS ({record}) "
                                "DELETE FROM {t} AS t USING doomed WHERE ({tk}) = ({dk}) "
                                "AND {newer} IS NOT FALSE").format(
            newest=newest, delete=delete,
            record=deleted_keys.record(name, "doomed", key_of("doomed"), recorded_values, version, compare,
                                       deleted_keys.job_id(job)),
            t=target.ident, tk=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in target.key),
            dk=sql.SQL(", ").join(typed_key("doomed")),
            newer=versions.newer(side(sql.SQL("t")), doomed))

    @property
    def plain(self) -> sql.Composable:
        return self._into + sql.SQL("SELECT ") + self._columns + sql.SQL(" ") + self._rows

    def merging(self, extra: sql.Composable = sql.SQL("")) -> sql.Composable:
        """The mode's INSERT over the rows it reads, `extra` a further condition on them (at `place`)."""
        return (self._into + sql.SQL("SELECT ") + self._columns + sql.SQL(" ") + self._source + self._kept + extra
                + self._conflict)

    def places(self, extra: sql.Composable) -> sql.Composable:
        """The stage places (ctid text) of the rows the merging INSERT reads that meet `extra`."""
        return sql.SQL("SELECT {}::text ").format(self.place) + self._source + extra


def _cast(c) -> bool:
    return normal_type(c.stage_type) != normal_type(c.pg_type)


def _typed(c, value: sql.Composable) -> sql.Composable:
    """A staged value as the target's column type (binary COPY may stage it as another)."""
    return sql.SQL("CAST({} AS {})").format(value, sql.SQL(c.pg_type)) if _cast(c) else value

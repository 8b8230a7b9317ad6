"""Which of two versions of a key is the newer, in SQL: the rule of `sink_options.VERSION_ORDERS`, for the move's
statements and for offsets_db's deleted keys alike.

Within one topic-partition Kafka's order decides: the higher offset is the newer, whatever the timestamps say
(producers' clocks go back, and Kafka and its compaction order a partition by offset). Between partitions (a key
moved to a partition added later, two topics into one table) the declared version decides: the version column
when there is one (a change event's source position, a field of the value), then the Kafka timestamp, a missing
value older than any present one, then topic, partition and offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg2 import sql

from streamfill.connectors.postgres.column_types import normal_type

COORDINATES = ("topic", "partition", "offset")
_TIMES = ("timestamp", "timestamptz", "date")
_INTEGERS = ("smallint", "integer", "bigint")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a row's alias, its version columns (the declared ones, then topic, partition
    and offset) and the PostgreSQL types of the declared ones."""

    alias: sql.Composable
    columns: tuple[str, ...]
    types: tuple[str, ...]

    def at(self, column: str) -> sql.Composable:
        return sql.SQL("{}.{}").format(self.alias, sql.Identifier(column))

    @property
    def declared(self) -> tuple[str, ...]:
        return self.columns[:-len(COORDINATES)]


def orderable(pg_type: str) -> bool:
    """Whether a column of this type can order versions: a number, a date or a time."""
    kind = normal_type(pg_type)
    return kind in (*_TIMES, *_INTEGERS, "real", "double precision") or kind.startswith("numeric")


def as_number(column: sql.Composable, pg_type: str) -> sql.Composable:
    """A version column's value as the number offsets_db keeps of it: a time as its epoch (exact to the
    microsecond), a number as it is."""
    if normal_type(pg_type) in _TIMES:
        return sql.SQL("extract(epoch FROM {})").format(column)
    return sql.SQL("{}::numeric").format(column)


def _comparable(side: Side, index: int) -> sql.Composable:
    """A declared column as its side's rank holds it. A version column (first of two declared) compares as a
    number, so a time of the target and the number offsets_db keeps of it rank alike; a missing value stands in as
    the lowest, after the `IS NOT NULL` that already ranks it below every present one."""
    column, kind = side.at(side.declared[index]), normal_type(side.types[index])
    if index == 0 and len(side.declared) > 1:
        return sql.SQL("coalesce({}, 0)").format(as_number(column, kind))
    if kind in _TIMES:
        return sql.SQL("coalesce({}, '-infinity')").format(column)
    return sql.SQL("coalesce({}::numeric, 0)").format(column)


def ranked(side: Side) -> sql.Composable:
    """The side's version as a row of values that compares across partitions as the declared order says."""
    parts: list[sql.Composable] = []
    for i, column in enumerate(side.declared):
        parts += [sql.SQL("{} IS NOT NULL").format(side.at(column)), _comparable(side, i)]
    return sql.SQL(", ").join([*parts, *(side.at(c) for c in side.columns[-len(COORDINATES):])])


def newer(old: Side, new: Side, *, strict: bool = False) -> sql.Composable:
    """A condition true when `new` is at least as new as `old` (newer, when strict): within one topic-partition by
    offset, between partitions by the declared order. NULL where the declared order meets missing coordinates."""
    cmp = sql.SQL("<" if strict else "<=")
    (old_topic, old_partition, old_offset), (new_topic, new_partition, new_offset) = (
        [side.at(c) for c in side.columns[-len(COORDINATES):]] for side in (old, new))
    return sql.SQL("(CASE WHEN {} = {} AND {} = {} THEN {} {} {} ELSE ({}) {} ({}) END)").format(
        old_topic, new_topic, old_partition, new_partition, old_offset, cmp, new_offset, ranked(old), cmp,
        ranked(new))


def newest_per_key(rows: sql.Composable, key: Sequence[str], version: Sequence[str]) -> sql.Composable:
    """A query of the newest row of each key among `rows` (a FROM item and its WHERE): the last row of each
    topic-partition (its highest offset), then among those the newest by the declared order. Each row keeps its
    place in the stage as `_at` (its ctid), so a part of the winners can be moved at a time."""
    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    topic, partition, offset = (sql.Identifier(c) for c in version[-len(COORDINATES):])
    declared = [sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(v)) for v in version]
    return sql.SQL("SELECT DISTINCT ON ({k}) * FROM (SELECT DISTINCT ON ({k}, {t}, {p}) *, ctid AS _at {rows} "
                   "ORDER BY {k}, {t}, {p}, {o} DESC) AS latest ORDER BY {k}, {d}").format(
        k=keys, t=topic, p=partition, o=offset, rows=rows, d=sql.SQL(", ").join(declared))

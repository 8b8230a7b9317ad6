"""The deleted keys of a table a sink deletes from (`deleted_keys`): what the commit's move adds to its statements.

A delete is recorded with the version of the record that made it, the newest per key kept; an upsert of the key
lands only when its version is newer than that, exactly as it lands only over an older row. So the key's row
depends only on its records, never on the order ranges are read, replayed or committed in. The statements are
composed here, offsets_db being the one place that names its tables; the move binds them into its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg2 import sql

from streamfill.offsets_db import schema
from streamfill.offsets_db.locks import advisory_holders, wait_for_lock
from streamfill.partitions import TopicPartition

# the version columns of deleted_keys, in the order of the longest version order (the sink's VERSION_ORDERS): the
# declared version as a number (a source position, a version column's value, a time as its epoch), the Kafka
# timestamp, then the coordinates; a shorter order (no version column) is matched to its last columns
VERSION_COLUMNS = ("version", "kafka_timestamp", "topic", "partition", "offset")
VERSION_TYPES = ("numeric", "timestamptz")  # of the columns before the coordinates

# the target's name is composed as sql.Literal, psycopg2's quoting of a value: the statements are composed once per
# write and their parameters are positional in the move's several shapes of statement
Side = tuple[sql.Composable, Sequence[str], Sequence[str]]  # a row's alias, its version columns, the declared' types
# (old, new, strict) -> a condition true when new is at least as new as old (newer, when strict)
Newer = Callable[[Side, Side, bool], sql.Composable]


def _ident() -> sql.Composable:
    return sql.Identifier(schema.name(), "deleted_keys")


def version_columns(version: Sequence[str]) -> tuple[str, ...]:
    return VERSION_COLUMNS[len(VERSION_COLUMNS) - len(version):]


def _recorded(alias: sql.Composable, version: Sequence[str]) -> Side:
    columns = version_columns(version)
    return alias, columns, VERSION_TYPES[len(VERSION_TYPES) - (len(columns) - 3):]


def newer_delete(target: str, key: Sequence[sql.Composable], row: Side, version: Sequence[str],
                 newer: Newer) -> sql.Composable:
    """A condition true when a delete of the row's key (its `key` expressions) is at least as new as the row."""
    return sql.SQL("EXISTS (SELECT FROM {t} AS d WHERE d.target = {name} AND d.key = jsonb_build_array({k}) "
                   "AND {newer} IS NOT FALSE)").format(
        t=_ident(), name=sql.Literal(target), k=sql.SQL(", ").join(key),
        newer=newer(row, _recorded(sql.SQL("d"), version), False))


def record(target: str, doomed: str, key: Sequence[sql.Composable], values: Sequence[sql.Composable],
           version: Sequence[str], newer: Newer, job_id: sql.Composable) -> sql.Composable:
    """A data-modifying CTE body: each key of the relation `doomed` (its `key` expressions, and `values`: its
    version as deleted_keys keeps it, a version column's value as a number) recorded as deleted, unless a delete of
    it at least as new is there already."""
    mine = version_columns(version)
    return sql.SQL("INSERT INTO {t} AS d (target, key, {cols}, job_id) SELECT {name}, jsonb_build_array({k}), {vals}, "
                   "{job} FROM {doomed} ON CONFLICT (target, key) DO UPDATE SET {sets}, job_id = EXCLUDED.job_id, "
                   "deleted_at = now() WHERE {newer}").format(
        t=_ident(), cols=sql.SQL(", ").join(map(sql.Identifier, mine)), name=sql.Literal(target),
        k=sql.SQL(", ").join(key), vals=sql.SQL(", ").join(values), job=job_id, doomed=sql.Identifier(doomed),
        sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in mine),
        newer=newer(_recorded(sql.SQL("d"), version), _recorded(sql.SQL("EXCLUDED"), version), True))


def job_id(job: str | None) -> sql.Composable:
    """The job's id, looked up in the statement that records its deletes (NULL without a job)."""
    if job is None:
        return sql.SQL("NULL::integer")
    return sql.SQL("(SELECT id FROM {} WHERE name = {})").format(sql.Identifier(schema.name(), "jobs"),
                                                                 sql.Literal(job))



DELETES_LOCK_SPACE = 0x5F15  # advisory-lock key space of deleting commits: (space, hash of the table's name)


def serialize(cur, target: str) -> float:
    """Deleting commits into one table, one at a time until each transaction ends: a commit that reads the
    deleted keys then sees every delete another committed, where two at once could each miss the other's (an
    older upsert landing after a concurrent delete of its key). Another deleting commit may hold the table for
    long (a backfill's chunk of many offsets): this one waits its turn however long that is, as it waits for the
    table's own lock (`locks.wait_for_lock`), rather than failing at lock_timeout; returns the seconds waited."""
    return wait_for_lock(cur, "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (DELETES_LOCK_SPACE, target),
                         what=f"deleting commit into {target}, waiting for the table's other deleting commit",
                         holders=advisory_holders(DELETES_LOCK_SPACE, target))


def any_recorded(cur, target: str) -> bool:
    """Whether a delete of the table is recorded: without one, and without deletes in the batch, a deleting write
    moves its rows as a plain upsert does (and once a prune has removed the last, it does so again)."""
    cur.execute(sql.SQL("SELECT EXISTS (SELECT FROM {} WHERE target = %s)").format(_ident()), (target,))
    return bool(cur.fetchone()[0])


def kept(cur) -> bool:
    """Whether this database keeps deleted keys (offsets_db at revision 0010 or later): where it does not, no
    write can have recorded a delete."""
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (schema.qualified("deleted_keys"),))
    return bool(cur.fetchone()[0])


def recorded_count(cur, target: str) -> int:
    """How many keys of the table have a delete recorded (for a refusal's message; the index answers it)."""
    cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE target = %s").format(_ident()), (target,))
    return int(cur.fetchone()[0])


def beside(cur, target: str) -> bool:
    """For a commit without deletes: whether a delete of the table is recorded, asked under the table's deletes
    lock taken shared, until the transaction ends. No deleting commit then records a table's first delete
    between this answer and this commit's end: it waits, and then finds this commit's rows to delete."""
    cur.execute("SELECT pg_try_advisory_xact_lock_shared(%s, hashtext(%s))", (DELETES_LOCK_SPACE, target))
    if not cur.fetchone()[0]:
        wait_for_lock(cur, "SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", (DELETES_LOCK_SPACE, target),
                      what=f"commit into {target}, waiting for the table's deleting commit",
                      holders=advisory_holders(DELETES_LOCK_SPACE, target))
    return any_recorded(cur, target)


# Pruning (offsets_db.retention): a recorded delete is there so that no record older than it lands later. A replay
# can only yield what Kafka still holds, so once Kafka no longer holds the record that made the delete, nothing
# older of its key in that partition can come: below the partition's log-start offset everything older is gone
# too, and a compacted partition drops a record only once a newer one of its key is cleaned (which removed every
# older one of the key) or, being a tombstone, after delete.retention.ms once cleaned.


@dataclass(frozen=True)
class Recorded:
    """A recorded delete as a prune weighs it: its table, its key (the JSON array as text) and the Kafka record
    that made it."""

    target: str
    key: str
    at: TopicPartition
    offset: int


def recorded_before(cur, cutoff: datetime, after: Recorded | None, job_ids: Sequence[int] | None,
                    limit: int) -> list[Recorded]:
    """Up to `limit` deletes recorded before `cutoff` (of the jobs `job_ids`, or of any), in their order past
    `after`: by table, topic, partition, offset and key."""
    since = (after.target, after.at.topic, after.at.partition, after.offset, after.key) if after else None
    cur.execute(sql.SQL('SELECT target, key::text, topic, partition, "offset" FROM {} WHERE deleted_at < %s '
                        "AND (%s::int[] IS NULL OR job_id = ANY(%s::int[])) "
                        'AND (%s::text IS NULL OR (target, topic, partition, "offset", key::text) > '
                        "(%s::text, %s::text, %s::int, %s::bigint, %s::text)) "
                        'ORDER BY target, topic, partition, "offset", key::text LIMIT %s').format(_ident()),
                (cutoff, job_ids, job_ids, since and since[0], *(since or (None,) * 5), limit))
    return [Recorded(t, k, TopicPartition(topic, p), o) for t, k, topic, p, o in cur.fetchall()]


def left_kafka(found: Sequence[Recorded], partitions: Collection[TopicPartition],
               log_starts: Mapping[TopicPartition, int],
               held: Collection[tuple[TopicPartition, int]]) -> list[Recorded]:
    """The recorded deletes whose record Kafka no longer holds: below its partition's log-start offset, or, at or
    above it, not among the records `held` (asked of the broker for exactly those). A delete of a topic or
    partition Kafka does not show (deleted, or hidden from this client) is kept: nothing says what it holds."""
    return [r for r in found if r.at in partitions and r.at in log_starts
            and (r.offset < log_starts[r.at] or (r.at, r.offset) not in held)]


def forget(cur, gone: Sequence[Recorded]) -> int:
    """Remove these recorded deletes, each only while it is the one weighed (a newer delete of its key recorded
    since is made by a record Kafka holds) and not locked by a commit in flight (the next prune weighs it)."""
    if not gone:
        return 0
    cur.execute(sql.SQL(
        "DELETE FROM {t} d WHERE (d.target, d.key) IN (SELECT x.target, x.key FROM {t} x JOIN unnest(%s::text[], "
        '%s::text[], %s::text[], %s::int[], %s::bigint[]) AS g(target, key, topic, partition, "offset") '
        "ON x.target = g.target AND x.key = g.key::jsonb AND x.topic = g.topic AND x.partition = g.partition "
        'AND x."offset" = g."offset" FOR UPDATE OF x SKIP LOCKED)').format(t=_ident()),
        ([r.target for r in gone], [r.key for r in gone], [r.at.topic for r in gone], [r.at.partition for r in gone],
         [r.offset for r in gone]))
    return cur.rowcount

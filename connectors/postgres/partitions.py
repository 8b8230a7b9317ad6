"""Publishing by attaching: a table the sink creates with the default key is partitioned by (topic, partition,
offset); each task writes its valid rows of one Kafka partition into a logged table of its own, with the CHECK
and UNIQUE constraints that let the commit ATTACH it as a partition in about a millisecond instead of
re-inserting every row (../shared/traps.md: sink 3.8x faster for 500,000 rows). The index is built by the task,
in parallel and outside the commit. Partitions accumulate, so adjacent small ones are merged later, off the
commit (`merge_small`). Identifiers are quoted with psycopg2.sql; values are bound parameters.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import psycopg2.errors
from psycopg2 import sql

log = logging.getLogger("streamfill.postgres_partitions")

PART_PREFIX = "_sf_part_"
KEY = ("topic", "partition", "offset")
MERGE_BELOW_ROWS = 2_000_000  # a partition with fewer rows is small; merging makes partitions of about this size
MERGE_MOST = 64  # small partitions at most in one merge: those of MERGE_BELOW_ROWS / 64 rows or more are copied once
MERGE_WHEN = 8  # smaller ones (a stream's batches) of one size tier before they are merged into one
MERGE_LOCK_SPACE = 0x5F12  # advisory-lock key space of merges: (MERGE_LOCK_SPACE, hashtext('schema.table'))


@dataclass(frozen=True)
class Part:
    """One task's rows of one Kafka partition, in a table of their own: offsets low <= offset < high."""

    table: str
    topic: str
    partition: int
    low: int
    high: int
    rows: int
    attachable: bool = True  # constraints in place (False: duplicate keys in the task's rows; inserted instead)


def part_name(table: str, write_id: str) -> str:
    return f"{PART_PREFIX}{table[:24]}_{write_id[:20]}"


def default_name(table: str) -> str:
    return f"{table[:48]}_sf_default"


def create_partitioned(cur, schema: str, table: str, columns: sql.Composable) -> None:
    """The target as a table PARTITION BY RANGE (topic, partition, offset), with its unique key and a default
    partition for rows that arrive another way (the insert fallback)."""
    ident = sql.Identifier(schema, table)
    cur.execute(sql.SQL('CREATE TABLE IF NOT EXISTS {} ({}, UNIQUE (topic, "partition", "offset")) '
                        'PARTITION BY RANGE (topic, "partition", "offset")').format(ident, columns))
    cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} DEFAULT").format(
        sql.Identifier(schema, default_name(table)), ident))


def is_partitioned(cur, schema: str, table: str) -> bool:
    cur.execute("""
        SELECT c.relkind = 'p' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s""", (schema, table))
    row = cur.fetchone()
    return bool(row and row[0])


def create_part(cur, schema: str, table: str, name: str) -> None:
    """An empty logged table shaped like the target; its comment lets a sweep drop it if its driver dies."""
    # autovacuum off until attached: a worker analysing the fresh table would hold up the commit's ATTACH
    cur.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS) WITH (autovacuum_enabled = false)").format(
        sql.Identifier(schema, name), sql.Identifier(schema, table)))
    cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.Identifier(schema, name), sql.Literal(json.dumps(
        {"streamfill_stage": "write", "target": f"{schema}.{table}", "created": time.time()}))))


def seal_part(cur, schema: str, part: Part) -> Part:
    """The constraints that make ATTACH a catalog change: NOT NULL key, a CHECK implying the partition bound,
    and a UNIQUE constraint that becomes the partition's index of the target's key."""
    ident = sql.Identifier(schema, part.table)
    digest = hashlib.sha1(part.table.encode()).hexdigest()[:8]
    cur.execute("SAVEPOINT sf_seal")
    try:
        cur.execute(sql.SQL('ALTER TABLE {t} ALTER COLUMN topic SET NOT NULL, ALTER COLUMN "partition" SET NOT NULL, '
                            'ALTER COLUMN "offset" SET NOT NULL, ADD CONSTRAINT {c} CHECK (topic = %s AND '
                            '"partition" = %s AND "offset" >= %s AND "offset" < %s), ADD CONSTRAINT {u} '
                            'UNIQUE (topic, "partition", "offset")').format(
            t=ident, c=sql.Identifier(f"sf_range_{digest}"), u=sql.Identifier(f"{part.table[:50]}_key")),
            (part.topic, part.partition, part.low, part.high))
        cur.execute("RELEASE SAVEPOINT sf_seal")
        return part
    except psycopg2.errors.UniqueViolation:
        cur.execute("ROLLBACK TO SAVEPOINT sf_seal")
        return Part(part.table, part.topic, part.partition, part.low, part.high, part.rows, attachable=False)


def attach(cur, schema: str, table: str, part: Part) -> None:
    """A catalog change when the part's constraints imply its bound; its comment then records its rows."""
    cur.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (%s, %s, %s) TO (%s, %s, %s)").format(
        sql.Identifier(schema, table), sql.Identifier(schema, part.table)),
        (part.topic, part.partition, part.low, part.topic, part.partition, part.high))
    cur.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled)").format(sql.Identifier(schema, part.table)))
    cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.Identifier(schema, part.table), sql.Literal(
        json.dumps({"streamfill_partition": f"{schema}.{table}", "rows": part.rows}))))


def publish(cur, schema: str, table: str, columns: Sequence[str], part: Part) -> int:
    """Inside the commit: attach the part as a partition, or (its range overlaps a partition, rows of its range
    sit in the default partition, its columns no longer match) insert its rows, keeping rows whose key exists."""
    if part.attachable:
        cur.execute("SAVEPOINT sf_attach")
        try:
            attach(cur, schema, table, part)
            cur.execute("RELEASE SAVEPOINT sf_attach")
            return part.rows
        except (psycopg2.errors.InvalidObjectDefinition, psycopg2.errors.CheckViolation,
                psycopg2.errors.DatatypeMismatch, psycopg2.errors.WrongObjectType) as exc:
            cur.execute("ROLLBACK TO SAVEPOINT sf_attach")
            log.info("%s.%s: %s not attached (%s); its rows are inserted", schema, table, part.table,
                     str(exc).strip().splitlines()[0])
    cols = sql.SQL(", ").join(map(sql.Identifier, columns))
    cur.execute(sql.SQL('INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT (topic, "partition", "offset") '
                        "DO NOTHING").format(sql.Identifier(schema, table), cols, cols,
                                             sql.Identifier(schema, part.table)))
    return cur.rowcount


def drop_unattached(cur, schema: str, names: Sequence[str]) -> None:
    """Parts of a replayed batch, of an aborted write or inserted by the fallback: never a partition."""
    for name in names:
        cur.execute("""
            SELECT c.relispartition FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relname = %s""", (schema, name))
        row = cur.fetchone()
        if row is not None and not row[0]:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))


def partitions(cur, schema: str, table: str) -> list[tuple[str, str, int, int, int, int]]:
    """(name, topic, partition, low, high, rows) of each range partition, by topic, partition and low offset
    (rows from the comment `attach` wrote: a partition attached some other way counts as large)."""
    cur.execute("""
        SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid), obj_description(c.oid, 'pg_class')
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass(%s) AND NOT pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'""",
                (sql.Identifier(schema, table).as_string(cur),))
    out = []
    for name, bound, comment in cur.fetchall():
        try:
            rows = int(json.loads(comment or "{}").get("rows", MERGE_BELOW_ROWS))
        except (ValueError, AttributeError):
            rows = MERGE_BELOW_ROWS
        low, high = _bounds(bound)
        out.append((name, low[0], int(low[1]), int(low[2]), int(high[2]), rows))
    return sorted(out, key=lambda p: (p[1], p[2], p[3]))


def _bounds(bound: str) -> tuple[list[str], list[str]]:
    """FOR VALUES FROM ('t', 0, '5') TO ('t', 0, '9') -> (['t','0','5'], ['t','0','9'])."""
    import csv

    def values(text: str) -> list[str]:
        return [v.strip() for v in next(csv.reader([text], quotechar="'", skipinitialspace=True))]

    inner = bound[bound.index("FROM (") + 6:]
    low, rest = inner.split(") TO (", 1)
    return values(low), values(rest.rstrip(")"))


def merge_small(conn, schema: str, table: str, *, below_rows: int = MERGE_BELOW_ROWS, when: int = MERGE_WHEN,
                lock_timeout: str = "10s", wait: str | None = None) -> int:
    """Merge each Kafka partition's run of adjacent small partitions into one (at most one run per Kafka
    partition per call): copy their rows into a new sealed table, then swap it in in one short transaction.
    Readers see the old partitions until the swap. Returns the partitions merged away. One merge per table at a
    time, whichever process commits into it: a second one returns 0 (two would pick the same run and one would
    drop the table the other just attached), or with `wait` (a PostgreSQL interval) first waits that long for
    the other to end, then looks at the partitions it left."""
    lock = _lock_key(schema, table)
    with conn.cursor() as cur:
        if wait is None:
            cur.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", lock)
            locked = cur.fetchone()[0]
        else:
            cur.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(wait)))
            try:
                cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", lock)
                locked = True
            except psycopg2.errors.LockNotAvailable:
                locked = False
    if not locked:
        conn.rollback()
        return 0
    try:
        conn.commit()
        return _merge_runs(conn, schema, table, below_rows, when, lock_timeout)
    finally:
        try:
            conn.rollback()  # whatever a failure left open; the session's lock outlives it
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", lock)
            conn.commit()
        except psycopg2.Error:  # ending the session releases its lock, wherever the connection is kept
            conn.close()


def merge_due(conn, schema: str, table: str) -> bool:
    """Whether a merge of the table's small partitions runs now, in any session, or is due (in transactions of
    its own: call it between transactions)."""
    lock = _lock_key(schema, table)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", lock)
        if not cur.fetchone()[0]:
            conn.commit()
            return True
        try:
            return bool(_runs(partitions(cur, schema, table), MERGE_BELOW_ROWS, MERGE_WHEN))
        finally:
            conn.rollback()
            cur.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", lock)
            conn.commit()


def _lock_key(schema: str, table: str) -> tuple[int, str]:
    """The advisory lock one table's merges share, as (key space, text hashed into the second key)."""
    return MERGE_LOCK_SPACE, f"{schema}.{table}"


def _merge_runs(conn, schema: str, table: str, below_rows: int, when: int, lock_timeout: str) -> int:
    merged = 0
    with conn.cursor() as cur:
        runs = _runs(partitions(cur, schema, table), below_rows, when)
    conn.commit()
    for run in runs:
        name = part_name(table, hashlib.sha1("|".join(p[0] for p in run).encode()).hexdigest())
        topic, partition, low, high = run[0][1], run[0][2], run[0][3], run[-1][4]
        with conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
            create_part(cur, schema, table, name)
            cur.execute(sql.SQL("INSERT INTO {} SELECT * FROM ({}) u ORDER BY \"offset\"").format(
                sql.Identifier(schema, name),
                sql.SQL(" UNION ALL ").join(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, p[0]))
                                            for p in run)))
            rows = cur.rowcount
            part = seal_part(cur, schema, Part(name, topic, partition, low, high, rows))
            conn.commit()
            if not part.attachable:
                cur.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, name)))
                conn.commit()
                continue
            try:
                cur.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(lock_timeout)))
                for p in run:
                    cur.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                        sql.Identifier(schema, table), sql.Identifier(schema, p[0])))
                moved = _move_from_default(cur, schema, table, part)
                attach(cur, schema, table, replace(part, rows=part.rows + moved))
                for p in run:
                    cur.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, p[0])))
                conn.commit()
                merged += len(run)
            except psycopg2.Error as exc:
                conn.rollback()
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
                conn.commit()
                log.info("%s.%s: merge of %d partitions put off (%s)", schema, table, len(run),
                         str(exc).strip().splitlines()[0])
    return merged


def tier(rows: int, when: int) -> int:
    """A partition's size class: merging `when` partitions of one tier makes one of the next, so a row is
    copied about once per tier (log base `when` of the sizes), never once per merge of a growing partition."""
    if when < 2:
        return 0
    level, rows = 0, max(rows, 1)
    while rows >= when:
        rows //= when
        level += 1
    return level


def _move_from_default(cur, schema: str, table: str, part: Part) -> int:
    """Inside the swap: rows of the merged range that sit in the default partition (offsets between the merged
    partitions whose rows were inserted rather than attached) move into the new partition, or its ATTACH would
    fail on them and the same run would be tried again after every commit."""
    default = default_name(table)
    cur.execute("SELECT to_regclass(%s)", (sql.Identifier(schema, default).as_string(cur),))
    if cur.fetchone()[0] is None:
        return 0
    cur.execute(sql.SQL('WITH moved AS (DELETE FROM {} WHERE topic = %s AND "partition" = %s AND "offset" >= %s '
                        'AND "offset" < %s RETURNING *) INSERT INTO {} SELECT * FROM moved').format(
        sql.Identifier(schema, default), sql.Identifier(schema, part.table)),
        (part.topic, part.partition, part.low, part.high))
    return cur.rowcount


def _runs(parts: list[tuple[str, str, int, int, int, int]], below_rows: int, when: int) -> list[list[tuple]]:
    """Per Kafka partition, at most one run of adjacent small partitions to merge:

    - partitions of at least below_rows / MERGE_MOST rows (a backfill's chunks, a large batch's tasks) wait until
      adjacent ones add up to below_rows, then those are merged into one: each of their rows is copied once,
      whatever the chunk size, and such a merge takes MERGE_MOST partitions at most;
    - smaller ones (a stream's batches) are merged once `when` or more adjacent ones share a size tier, so they
      grow to that floor in a few copies, never once per merge of a growing partition;
    - when neither is due and there are `when` squared small partitions, the longest run of adjacent ones is
      merged regardless of size, split at any partition holding more rows than the rest (`_without_dominant`),
      so a merged partition is copied again only when the merge at least doubles it; a small partition between
      two large ones has nothing to be merged with and stays."""
    floor = max(1, -(-below_rows // MERGE_MOST))
    runs, i = [], 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j][1:3] == parts[i][1:3]:
            j += 1
        group = parts[i:j]
        best = _full_size(group, below_rows, floor)
        if not best:
            best = _longest(group, floor, lambda a, b: tier(a, when) == tier(b, when))
            best = best[:MERGE_MOST] if len(best) >= max(2, when) else []
        if not best and sum(p[5] < below_rows for p in group) >= when * when:
            trimmed = [_without_dominant(run[:MERGE_MOST]) for run in _small_runs(group, below_rows)]
            best = max(trimmed, key=len, default=[])
            best = best if len(best) >= 2 else []
        if best:
            runs.append(best)
        i = j
    return runs


def _small_runs(group: list[tuple], below_rows: int) -> list[list[tuple]]:
    """Each maximal run of adjacent partitions under below_rows."""
    runs: list[list[tuple]] = [[]]
    for p in group:
        if p[5] < below_rows:
            runs[-1].append(p)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _without_dominant(run: list[tuple]) -> list[tuple]:
    """The longest piece of the run in which no partition holds more rows than the rest of the piece: merging
    such a partition in would copy it again for a few rows (quadratic copying as new small ones keep coming),
    so it splits the run."""
    if len(run) < 2:
        return run
    largest = max(range(len(run)), key=lambda i: run[i][5])
    if run[largest][5] * 2 <= sum(p[5] for p in run):
        return run
    return max(_without_dominant(run[:largest]), _without_dominant(run[largest + 1:]), key=len)


def _full_size(group: list[tuple], below_rows: int, floor: int) -> list[tuple]:
    """The first run of adjacent partitions of `floor` rows or more, each small, whose rows add up to below_rows."""
    run: list[tuple] = []
    total = 0
    for p in group:
        if not floor <= p[5] < below_rows:
            run, total = [], 0
            continue
        run.append(p)
        total += p[5]
        if total >= below_rows:
            return run
    return []


def _longest(group: list[tuple], below_rows: int, alike) -> list[tuple]:
    """The longest run of adjacent small partitions in which each is `alike` its predecessor by rows."""
    run: list[tuple] = []
    best: list[tuple] = []
    for p in group:
        if p[5] >= below_rows:
            run = []
        elif run and not alike(run[-1][5], p[5]):
            run = [p]
        else:
            run.append(p)
        if len(run) > len(best):
            best = list(run)
    return best

"""Widening a column: how long `ALTER TABLE ... ALTER COLUMN ... TYPE` holds a table's ACCESS EXCLUSIVE lock,
against the table's size; what connectors/postgres/table_evolution.py's REWRITE_LIMIT rests on.

One table per size of --sizes (MB of pg_total_relation_size: heap, indexes and TOAST), made like a pipeline's:
topic text, partition integer, "offset" bigint, kafka_timestamp timestamptz, n integer, note text, a UNIQUE index
on (partition, "offset", topic) as the sink creates it, and two columns the catalog-only changes widen (amount
numeric(10,2), code varchar(20)); filled by generate_series to the size, rewritten by VACUUM FULL as the untimed
rewrite after each round leaves it (so every round starts from the same table), then VACUUM ANALYZE. On each
table, in the same minutes:

1. the rewrite the sink makes itself up to REWRITE_LIMIT: n integer -> bigint (every row written again, the unique
   index rebuilt);
2. the catalog-only changes the sink makes at any size: amount numeric(10,2) -> numeric(14,2), ADD COLUMN of a
   nullable text column, code varchar(20) -> text (whether each rewrote the table is checked by its filenode).

Each ALTER runs in a transaction of its own that first takes the lock (LOCK TABLE ... IN ACCESS EXCLUSIVE MODE,
which waits for the reader's query in flight, about the reader's usual query below): its time is from the lock
granted to the commit's end, how long readers are held. During each ALTER (the lock's wait included) a reader
thread runs `SELECT count(*) FROM t WHERE "offset" = %s` in a loop on a connection of its own (a random offset of
the table each time), and reports its longest single query that overlapped the ALTER: the reader's worst wait.
Its usual query (the median of those that did not overlap) is printed beside it: the unique index leads with
partition, so the query scans the whole table (a parallel sequential scan) and its usual time grows with it.

After each round the table is put back (n integer, amount numeric(10,2), code varchar(20), the added column
dropped: one untimed rewrite) and VACUUM ANALYZEd. --repeat rounds, the sizes interleaved (ascending, then
descending), medians. Prints each round as it is measured, then the medians per size and the rewrite's cost per
MB fitted over the sizes. Needs `streamfill stack up`; works in the stack's offsets_db database and drops every
table it made when it ends or fails.

    .venv/bin/python bench/widening.py [--sizes 8,32,64,128] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import time
import uuid

from cleanup import Leftovers, measured
from shared.widening_reader import Reader
from shared.widening_results import MB, Sample, Sized, console, report
from shared.widening_sql import ALTERS, CHANGES, CREATE, FILL, LOCK, PACK, RESET, REWRITE, SHORT, statement

SIZES = (8, 32, 64, 128)
FILL_CHUNK = 500_000  # rows per INSERT ... SELECT while filling
CALIBRATE = 5_000  # the first chunk's rows, to learn the bytes a row takes


def scalar(cur, query, params=()):
    cur.execute(query, params)
    return cur.fetchone()[0]


def total_size(cur, table: str, function: str = "pg_total_relation_size") -> int:
    """The table's size: heap, indexes and TOAST (pg_relation_size: the heap alone)."""
    from psycopg2 import sql

    return scalar(cur, sql.SQL("SELECT {}(to_regclass(%s))").format(sql.Identifier(function)),
                  (sql.Identifier(table).as_string(cur),))


def filenode(cur, table: str) -> int:
    from psycopg2 import sql

    return scalar(cur, "SELECT pg_relation_filenode(to_regclass(%s))", (sql.Identifier(table).as_string(cur),))


def vacuum(cur, table: str) -> None:
    cur.execute(statement("VACUUM (ANALYZE) {t}", table))


def fill(cur, sized: Sized) -> None:
    """The table made and filled to about its size as the untimed rewrite after each round leaves it, then VACUUM
    ANALYZE. Rows go in by generate_series (a first few tell the bytes a row takes) and PACK rewrites them after
    each step: the unique index, filled 4 partitions at a time, splits its pages half empty, and a rewrite rebuilds
    it packed and gives each row the null of the column the round added and dropped; without it the first round's
    table would be other than the next ones'."""
    cur.execute(statement(CREATE, sized.table))
    target, rows, began = sized.mb * MB, 0, time.perf_counter()
    missing = CALIBRATE
    while True:
        for first in range(rows, rows + missing, FILL_CHUNK):
            cur.execute(statement(FILL, sized.table), {"topic": "bench_orders", "anchor": "2026-11-28T00:00:00Z",
                                                       "first": first,
                                                       "last": min(first + FILL_CHUNK, rows + missing) - 1})
        rows += missing
        for step in PACK:
            cur.execute(statement(step, sized.table))
        size = total_size(cur, sized.table)
        if size >= target * 0.98:
            break
        missing = max(1_000, math.ceil((target - size) / (size / rows)))
    vacuum(cur, sized.table)
    sized.rows = rows
    console.print(f"  {sized.table}: {rows:,} rows, {total_size(cur, sized.table) / MB:,.1f} MB "
                  f"(heap {total_size(cur, sized.table, 'pg_relation_size') / MB:,.1f} MB) in "
                  f"{time.perf_counter() - began:,.1f} s", highlight=False)


def alter(cur, reader: Reader, sized: Sized, change: str) -> Sample:
    """The change in a transaction of its own while the reader reads, timed from the moment it holds ACCESS
    EXCLUSIVE (LOCK TABLE, which waits for the reader's query in flight) to its commit's end."""
    size, before = total_size(cur, sized.table), filenode(cur, sized.table)
    with reader:
        asked = time.perf_counter()
        cur.execute("BEGIN")
        try:
            cur.execute(statement(LOCK, sized.table))
            held = time.perf_counter()
            cur.execute(statement(ALTERS[change], sized.table))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        ended = time.perf_counter()
    worst, usual = reader.during(asked, ended)
    sample = Sample(ended - held, size, filenode(cur, sized.table) != before, worst, usual)
    if sample.rewrote != (change == REWRITE):
        console.print(f"  [yellow]{change} on {sized.table} {'rewrote' if sample.rewrote else 'did not rewrite'} "
                      "the table, unlike what the sink expects of it[/yellow]")
    sized.samples[change].append(sample)
    return sample


def reset(cur, sized: Sized) -> None:
    cur.execute(statement(RESET, sized.table))
    vacuum(cur, sized.table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="table sizes in MB, comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every change on every table, interleaved")
    measured(measure, ap.parse_args())


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    import psycopg2

    from streamfill.connectors.postgres.connection import dsn

    sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
    conninfo = dsn(settings.offsets_db_url)
    run = uuid.uuid4().hex[:8]
    tables = [Sized(mb, made.table(f"bench_widen_{run}_{mb}mb")) for mb in sizes]
    # a lock held by someone else fails the ALTER after a minute rather than hanging the run
    conn = psycopg2.connect(conninfo, application_name="bench-widening", options="-c lock_timeout=60s")
    conn.autocommit = True
    readers: dict[str, Reader] = {}
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version()")
            console.print(f"{cur.fetchone()[0].split(' on ')[0]}; filling {len(tables)} tables", highlight=False)
            for sized in tables:
                fill(cur, sized)
                readers[sized.table] = Reader(conninfo, sized.table, sized.rows // 4, seed=sized.mb)
            for round_ in range(args.repeat):
                for sized in (tables if round_ % 2 == 0 else tables[::-1]):
                    reader = readers[sized.table]
                    done = {change: alter(cur, reader, sized, change) for change in CHANGES}
                    reset(cur, sized)
                    console.print(
                        f"round {round_ + 1}/{args.repeat}, {done[REWRITE].size / MB:,.1f} MB: "
                        + ", ".join(f"{SHORT[c]} {s.seconds:.3f} s (reader {s.worst:.3f})" for c, s in done.items()),
                        highlight=False)
    finally:
        for reader in readers.values():
            reader.close()
        conn.close()
    report(tables, args.repeat)


if __name__ == "__main__":
    main()

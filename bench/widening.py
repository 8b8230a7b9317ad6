"""Widening a column: how long `ALTER TABLE ... ALTER COLUMN ... TYPE` holds a table's ACCESS EXCLUSIVE lock,
against the table's size; what connectors/postgres/target.py's REWRITE_LIMIT rests on.

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
import random
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from leftovers import Leftovers, measured
from streamfill.connectors.postgres.target import REWRITE_LIMIT

console = Console()
if not console.is_terminal:
    console.width = 160  # the medians' table is wide; a pipe or a file would get 80 columns

SIZES = (8, 32, 64, 128)
MB = 2**20
FILL_CHUNK = 500_000  # rows per INSERT ... SELECT while filling
CALIBRATE = 5_000  # the first chunk's rows, to learn the bytes a row takes
WARM = 3  # the reader's queries before each ALTER starts
REWRITE = "integer -> bigint"
CATALOG = ("numeric(10,2) -> numeric(14,2)", "ADD COLUMN text", "varchar(20) -> text")
CHANGES = (REWRITE, *CATALOG)
SHORT = dict(zip(CHANGES, ("rewrite", "numeric", "add column", "varchar")))  # a round's line

CREATE = """CREATE TABLE {t} (topic text NOT NULL, {partition} integer NOT NULL, {offset} bigint NOT NULL,
    kafka_timestamp timestamptz, n integer, note text, amount numeric(10,2), code varchar(20),
    UNIQUE ({partition}, {offset}, topic))"""
# rows `first`..`last`: 4 partitions of one topic, each row's offset its number / 4, a note of about 45 bytes
FILL = """INSERT INTO {t} (topic, {partition}, {offset}, kafka_timestamp, n, note, amount, code)
    SELECT %(topic)s, (i %% 4)::int, i / 4, %(anchor)s::timestamptz + i * interval '1 ms', i::int,
           'order ' || i || ' ' || md5(i::text), ((i %% 1000000) / 100.0)::numeric(10,2),
           (ARRAY['EUR', 'USD', 'GBP'])[(i %% 3 + 1)::int]
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) i"""
ALTERS = {
    REWRITE: "ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
    CATALOG[0]: "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,2)",
    CATALOG[1]: "ALTER TABLE {t} ADD COLUMN extra text",
    CATALOG[2]: "ALTER TABLE {t} ALTER COLUMN code TYPE text",
}
LOCK = "LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE"
RESET = ("ALTER TABLE {t} ALTER COLUMN n TYPE integer, ALTER COLUMN amount TYPE numeric(10,2), "
         "ALTER COLUMN code TYPE varchar(20), DROP COLUMN extra")
# the table rewritten with its rows as RESET leaves them (VACUUM FULL forms each row again, the added column null)
PACK = ("ALTER TABLE {t} ADD COLUMN extra text", "VACUUM FULL {t}", "ALTER TABLE {t} DROP COLUMN extra")
READ = "SELECT count(*) FROM {t} WHERE {offset} = %s"


def statement(template: str, table: str):
    from psycopg2 import sql

    return sql.SQL(" ".join(template.split())).format(t=sql.Identifier(table), partition=sql.Identifier("partition"),
                                                      offset=sql.Identifier("offset"))


@dataclass
class Sample:
    """One ALTER: its seconds, the table's size before it, whether it rewrote the table, the reader's queries."""

    seconds: float  # ACCESS EXCLUSIVE held: from the lock granted to the commit's end
    size: int
    rewrote: bool
    worst: float  # the reader's longest query that overlapped the ALTER
    usual: float | None  # the reader's median query that did not


@dataclass
class Sized:
    """One table of the run and its samples per change, a sample per round."""

    mb: int
    table: str
    rows: int = 0
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {c: [] for c in CHANGES})


class Reader:
    """`SELECT count(*) FROM t WHERE "offset" = %s` in a loop on a thread and a connection of its own, each query's
    start and end recorded, while the `with` block runs (from WARM queries done to its last query ended)."""

    def __init__(self, conninfo: str, table: str, offsets: int, seed: int) -> None:
        import psycopg2

        self.conn = psycopg2.connect(conninfo, application_name="bench-widening-reader")
        self.conn.autocommit = True
        self.query, self.offsets, self.rng = statement(READ, table), offsets, random.Random(seed)
        self.queries: list[tuple[float, float]] = []
        self.stop, self.started, self.error = threading.Event(), threading.Event(), None

    def __enter__(self) -> Reader:
        self.queries, self.error = [], None
        self.stop.clear()
        self.started.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self.started.wait(60)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._thread.join(300)
        if self.error is not None and exc[0] is None:
            raise self.error

    def _run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    offset = self.rng.randrange(self.offsets)
                    began = time.perf_counter()
                    cur.execute(self.query, (offset,))
                    cur.fetchone()
                    self.queries.append((began, time.perf_counter()))
                    if len(self.queries) >= WARM:
                        self.started.set()
        except Exception as exc:  # noqa: BLE001 - raised in the measuring thread by __exit__
            self.error = exc
            self.started.set()

    def during(self, start: float, end: float) -> tuple[float, float | None]:
        """The longest query that overlapped [start, end] and the median of those that did not."""
        inside = [e - b for b, e in self.queries if b < end and e > start]
        outside = [e - b for b, e in self.queries if not (b < end and e > start)]
        return max(inside, default=0.0), statistics.median(outside) if outside else None

    def close(self) -> None:
        self.conn.close()


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

    from streamfill.connectors.spark.postgres_sink import dsn

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


def report(tables: list[Sized], repeat: int) -> None:
    med = statistics.median
    table = Table(title=f"ALTER TABLE on a pipeline's table, medians of {repeat} rounds: the rewrite ({REWRITE}), the "
                        "catalog-only changes, and the reader's longest query during them (the slowest of the three "
                        "catalog-only ALTERs of a round), seconds")
    for name in ("MB", "rows", "rewrite s", "MB/s", "reader's worst wait, rewrite s", *(f"{c} s" for c in CATALOG),
                 "reader's worst wait, catalog-only s", "reader's usual query s"):
        table.add_column(name, justify="right")
    points = []
    for sized in tables:
        mb = med(s.size for s in sized.samples[REWRITE]) / MB
        rewrite = med(s.seconds for s in sized.samples[REWRITE])
        points.append((mb, rewrite))
        catalog_worst = med(max(sized.samples[c][r].worst for c in CATALOG) for r in range(repeat))
        usual = [s.usual for c in CHANGES for s in sized.samples[c] if s.usual is not None]
        table.add_row(f"{mb:,.1f}", f"{sized.rows:,}", f"{rewrite:.3f}", f"{mb / rewrite:,.1f}",
                      f"{med(s.worst for s in sized.samples[REWRITE]):.3f}",
                      *(f"{med(s.seconds for s in sized.samples[c]):.4f}" for c in CATALOG),
                      f"{catalog_worst:.3f}", f"{med(usual):.3f}" if usual else "-")
    console.print(table)
    if len({mb for mb, _ in points}) >= 2:
        slope, fixed = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
        limit = REWRITE_LIMIT / MB
        console.print(f"rewrite fitted over the sizes: {fixed:.3f} s + {slope * 1000:.1f} ms per MB; at REWRITE_LIMIT "
                      f"({limit:.0f} MB) about {fixed + slope * limit:.2f} s, every reader of the table waiting that "
                      "long", highlight=False)


if __name__ == "__main__":
    main()

"""offsets_db as history grows: the same micro-batch commit and the same page, against an empty offsets_db.

The levels are 0, 10^4, 10^5, 10^6 and 10^7 batches of a stream's history. 10^7 batches of a 1 s trigger are
116 days (a year would be 3.2 * 10^7): the worst case of a job whose history no retention pruned.

The history is synthesized by set-based SQL (generate_series, as bench/ui_queries.py does) into a scratch
database: one stream job reading 4 topics of 1 partition each, a batch a second, 5,000 offsets per topic per
batch (4 batch_offsets rows per batch), a dead letter every 5th batch, a quality result every 200th, a new run
every 3 days, 5 data-loss events, and 4 other jobs for the overview. The levels grow in steps: going from 10^6
to 10^7 adds 9 * 10^6 batches after those already there, in chunks of --chunk with progress printed, then
VACUUM ANALYZE (the state autovacuum keeps a long-running database in). Batches are a second apart and the
last one the run makes is at the run's start.

At each level, side by side with a second scratch database whose job has no history at all (the empty
offsets_db, measured in the same minutes, so the machine's changes of speed cancel out in the ratios):

1. The micro-batch's offsets_db work as a running `streamfill_kafka` -> `streamfill_postgres` stream does it,
   each batch continuing the job's history: the launch holds the job (lease, run); the source records the plan
   (`JobTracker.record`); tasks stage 20,000 rows, one a dead letter, with the sink's own COPY path (4 writes,
   one per topic; not timed); the driver commits (`_commit`: rows, dead letter, offsets, snapshot and commit
   number in one transaction); the source's commit hook runs (`JobTracker.committed_by_spark`). Median and p95
   of --repeat batches per side, after --warmup, the two sides alternating.
2. The page: every endpoint bench/ui_queries.py times, in-process, median of --repeat rounds per endpoint. The
   page's clock is pinned to the history's last second, so at every level it shows a job running now. Its 1h,
   24h and 7d windows hold up to 3,600, 86,400 and 604,800 batches at a 1 s trigger: up to 10^6 the windows
   grow with the levels, from 10^6 to 10^7 only the history behind them does ("x prev": the slowest endpoint
   against itself one level before).

Prints each level as it is measured, then the curve, the calls and endpoints per level, a verdict against the
target (within 1.2x of the empty offsets_db) and, after a run short of 10^7, the time and disk 10^7 would take
(try `--max 100000` first). Needs `streamfill stack up`; both databases are dropped at the end.

    .venv/bin/python bench/growth.py [--levels 0,10000,100000,1000000,10000000] [--max N] [--repeat 20]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pyarrow as pa
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, create_engine, make_url, text

from commit_overhead import p95
from leftovers import scratch_database
from streamfill.offsets_db import schema
from streamfill.partitions import TopicPartition
from streamfill.settings import get_settings
from ui_queries import JOB, endpoints, page_client

console = Console()
if not console.is_terminal:
    console.width = 160  # the curve's table is wide; a pipe or a file would get 80 columns

LEVELS = (0, 10_000, 100_000, 1_000_000, 10_000_000)
TOPICS = ("bench_orders", "bench_payments", "bench_refunds", "bench_shipments")
PER = 5_000  # offsets per topic per batch: 20,000 rows a batch over the 4 topics
DEAD_EVERY, QUALITY_EVERY = 5, 200  # a dead letter every 5th batch, a quality result every 200th
RUN_EVERY = 3 * 86_400  # batches per run: the stream is relaunched every 3 days
SINK_TABLE = "bench_growth_sink"
WEEK_S = 7 * 86_400  # the page's longest window, in batches at a 1 s trigger
TARGET = 1.2

# Synthesized history; `s` is the batch's seq. Times are a function of seq (:anchor - (:top - s) seconds) so the
# steps and the benchmark's own batches (re-dated after they commit) make one timeline. No other braces in the
# SQL than the {table} names schema.sql fills in (str.format).
RUNS = """
INSERT INTO {runs} (job_id, dag_id, airflow_run_id, host, pid, status, started_at, ended_at)
SELECT :job_id, 'streamfill_stream__' || :job, 'scheduled__' || r, 'bench-host', 4242, 'succeeded',
       :anchor - (:top - (:shift + (r - 1) * :run_every + 1)) * interval '1 s',
       :anchor - (:top - (:shift + r * :run_every)) * interval '1 s'
FROM generate_series(CAST(:r1 AS int), CAST(:r2 AS int)) r
WHERE NOT EXISTS (SELECT 1 FROM {runs} x WHERE x.job_id = :job_id AND x.airflow_run_id = 'scheduled__' || r)
ORDER BY r
"""
RUN_IDS = """
SELECT id FROM {runs} WHERE job_id = :job_id AND airflow_run_id LIKE 'scheduled\\_\\_%'
ORDER BY split_part(airflow_run_id, '__', 2)::int
"""
CHUNK = [
    """INSERT INTO {batches} (job_id, seq, spark_batch_id, run_id, planned_at, committed_at, rows_written,
                              dead_letters, behind, commit_no, commit_ms)
       SELECT :job_id, s, s - 1, (CAST(:runs AS integer[]))[((s - :shift - 1) / :run_every + 1)::int],
              :anchor - (:top - s) * interval '1 s', :anchor - (:top - s) * interval '1 s' + interval '500 ms',
              :rows - (s % :dead_every = 0)::int, (s % :dead_every = 0)::int, (s % 97) * 40, s, 3.0 + s % 7
       FROM generate_series(CAST(:s1 AS bigint), CAST(:s2 AS bigint)) s""",
    """INSERT INTO {batch_offsets} (batch_id, topic, partition, start_offset, end_offset, log_start, log_end)
       SELECT b.id, (CAST(:topics AS text[]))[p + 1], 0, (b.seq - 1) * :per, b.seq * :per, 0,
              b.seq * :per + (b.seq % 97) * 10
       FROM {batches} b CROSS JOIN generate_series(0, :n_topics - 1) p
       WHERE b.job_id = :job_id AND b.seq BETWEEN :s1 AND :s2""",
    """INSERT INTO {dead_letters} (job_id, batch_id, topic, partition, "offset", raw_value, error, created_at)
       SELECT b.job_id, b.id, (CAST(:topics AS text[]))[(b.seq % :n_topics + 1)::int], 0, b.seq * :per - 1,
              convert_to(jsonb_build_object('amount', -b.seq)::text, 'UTF8'),
              (ARRAY['amount below min 0: -' || b.seq, 'invalid JSON',
                     'currency not in [EUR, USD]: XX' || b.seq % 7])[(b.seq % 3 + 1)::int], b.committed_at
       FROM {batches} b WHERE b.job_id = :job_id AND b.seq BETWEEN :s1 AND :s2 AND b.seq % :dead_every = 0""",
    """INSERT INTO {quality_results} (job_id, suite, table_name, success, statistics, result, checked_at)
       SELECT :job_id, 'bench', :table, s % 1000 <> 0,
              jsonb_build_object('evaluated_expectations', 12, 'successful_expectations', 12 - (s % 1000 = 0)::int),
              jsonb_build_object('expectations', jsonb_build_array(jsonb_build_object(
                  'expectation_type', 'expect_column_values_to_be_unique', 'success', s % 1000 <> 0,
                  'kwargs', jsonb_build_object('column', 'event_id'),
                  'result', jsonb_build_object('unexpected_count', 3)))),
              :anchor - (:top - s) * interval '1 s' + interval '1 s'
       FROM generate_series(CAST(:s1 AS bigint), CAST(:s2 AS bigint)) s WHERE s % :quality_every = 0""",
]
# after a step: the job stands at its newest batch's ends, with as many commits as batches
STEP_END = [
    """INSERT INTO {snapshots} (job_id, topic, partition, next_offset, batch_id, updated_at)
       SELECT b.job_id, bo.topic, bo.partition, bo.end_offset, bo.batch_id, b.committed_at
       FROM {batches} b JOIN {batch_offsets} bo ON bo.batch_id = b.id WHERE b.job_id = :job_id AND b.seq = :s2
       ON CONFLICT (job_id, topic, partition) DO UPDATE SET next_offset = excluded.next_offset,
           batch_id = excluded.batch_id, updated_at = excluded.updated_at""",
    "UPDATE {jobs} SET commits = :s2 WHERE id = :job_id",
    """INSERT INTO {data_loss_events} (job_id, topic, partition, kind, lost_from, lost_to, detected_at)
       SELECT :job_id, (CAST(:topics AS text[]))[n % :n_topics + 1], 0, 'aged out', n * 1000, n * 1000 + 50,
              :anchor - (:top - :s1 - n * 10) * interval '1 s'
       FROM generate_series(1, 5) n WHERE NOT EXISTS (SELECT 1 FROM {data_loss_events} WHERE job_id = :job_id)""",
]
# the benchmark's own committed batches, moved into the timeline right after the history they followed
REDATE = [
    """UPDATE {batches} SET planned_at = :anchor - (:top - seq) * interval '1 s',
                            committed_at = :anchor - (:top - seq) * interval '1 s' + interval '500 ms'
       WHERE job_id = :job_id AND seq BETWEEN :s1 AND :s2""",
    """UPDATE {dead_letters} d SET created_at = b.committed_at FROM {batches} b
       WHERE b.id = d.batch_id AND b.job_id = :job_id AND b.seq BETWEEN :s1 AND :s2""",
]
OTHER_JOBS = [
    "INSERT INTO {jobs} (name, kind, config) SELECT 'bench_other_' || i, 'backfill', jsonb_build_object() "
    "FROM generate_series(1, 4) i",
    "INSERT INTO {runs} (job_id, dag_id, airflow_run_id, status, started_at, ended_at) SELECT j.id, "
    "'streamfill_backfill__' || j.name, 'manual__' || r, 'succeeded', now() - r * interval '1 day', "
    "now() - r * interval '1 day' + interval '10 min' FROM {jobs} j, generate_series(1, 5) r "
    "WHERE j.name LIKE 'bench\\_other\\_%'",
]
VACUUMED = ("jobs", "runs", "batches", "batch_offsets", "snapshots", "dead_letters", "quality_results",
            "data_loss_events", "job_leases")


def run_sql(conn, statements: list[str], **params) -> None:
    for sql in statements:
        conn.execute(text(schema.sql(sql)), params)


def scalar(engine: Engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(schema.sql(sql)), params).scalar()


def vacuum(url: str) -> None:
    """VACUUM ANALYZE the tables a step filled: visibility map and statistics as autovacuum would leave them,
    and no autovacuum of a step's rows running into the next measurement."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("VACUUM (ANALYZE) " + ", ".join(schema.qualified(t) for t in VACUUMED)))
    engine.dispose()


@dataclass
class Timeline:
    """seq -> time: batch `seq` was planned at anchor - (top - seq) s; `top` is the last seq the run makes."""

    anchor: datetime
    top: int

    def at(self, seq: int) -> datetime:
        return self.anchor - timedelta(seconds=self.top - seq)

    def params(self) -> dict:
        return {"anchor": self.anchor, "top": self.top}


@dataclass
class Step:
    batches: int
    seconds: float
    bytes_added: int


def synthesize(url: str, job_id: int, have: int, want: int, chunk: int, timeline: Timeline) -> Step:
    """Batches `have`+1 .. `want` of the job's synthesized history, after its newest batch (the benchmark's own
    commits included), with their offsets, dead letters, quality results and runs; then VACUUM ANALYZE."""
    engine = create_engine(url)
    started, size_before = time.perf_counter(), scalar(engine, "SELECT pg_database_size(current_database())")
    newest = scalar(engine, "SELECT coalesce(max(seq), 0) FROM {batches} WHERE job_id = :job_id", job_id=job_id)
    shift = newest - have  # synthesized batch k has seq k + shift
    params = {"job_id": job_id, "job": JOB, "shift": shift, "run_every": RUN_EVERY, "rows": PER * len(TOPICS),
              "dead_every": DEAD_EVERY, "quality_every": QUALITY_EVERY, "topics": list(TOPICS),
              "n_topics": len(TOPICS), "per": PER, "table": SINK_TABLE, **timeline.params()}
    with engine.begin() as conn:
        run_sql(conn, [RUNS], **params, r1=have // RUN_EVERY + 1, r2=(want - 1) // RUN_EVERY + 1)
        runs = list(conn.execute(text(schema.sql(RUN_IDS)), params).scalars())
    total = want - have
    for k1 in range(have + 1, want + 1, chunk):
        k2 = min(k1 + chunk - 1, want)
        with engine.begin() as conn:  # a transaction per chunk: 10^6 batches are 4 * 10^6 offsets rows
            run_sql(conn, CHUNK, **params, runs=runs, s1=k1 + shift, s2=k2 + shift)
        done, spent = k2 - have, time.perf_counter() - started
        console.print(f"  {done:>12,} / {total:,} batches, {spent:,.0f} s, {done / spent:,.0f} batches/s, "
                      f"about {(total - done) * spent / done:,.0f} s to go", highlight=False)
    with engine.begin() as conn:
        run_sql(conn, STEP_END, **params, s1=have + 1 + shift, s2=want + shift)
    vacuumed = time.perf_counter()
    vacuum(url)
    console.print(f"  VACUUM ANALYZE {time.perf_counter() - vacuumed:,.0f} s", highlight=False)
    added = scalar(engine, "SELECT pg_database_size(current_database())") - size_before
    engine.dispose()
    return Step(total, time.perf_counter() - started, added)


def setup(url: str) -> int:
    """The stream job (starting at offset 0 of each topic, as a new stream pins its start) and 4 other jobs with
    a few runs each; returns the stream job's id."""
    from streamfill.offsets_db.store import OffsetStore

    store = OffsetStore(url)
    job_id = store.ensure_job(JOB, "stream", {"subscription": repr(TOPICS), "commit_to_group": None})
    store.pin_start(JOB, {TopicPartition(t, 0): 0 for t in TOPICS})
    with store.engine.begin() as conn:
        run_sql(conn, OTHER_JOBS)
    store.engine.dispose()
    vacuum(url)
    return job_id


@dataclass
class Side:
    """One database's stream launch at one level: its lease, run, the source's tracker and the sink's plan."""

    url: str
    next_offset: int = 0  # where each topic's next batch starts (all 4 topics move together)
    times: dict[str, list[float]] = field(default_factory=lambda: {"plan": [], "commit": [], "hook": []})

    def launch(self, stack: ExitStack) -> None:
        """What a stream launch does before its first batch: hold the job, record its run, plan the sink."""
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

        from streamfill.connectors.spark.postgres_sink import _plan
        from streamfill.connectors.spark.tracking import JobTracker
        from streamfill.offsets_db.engine import shared_engine
        from streamfill.offsets_db.store import OffsetStore

        store = OffsetStore(shared_engine(self.url))
        lease = stack.enter_context(store.hold(JOB))
        self.run_id = store.start_run(JOB, dag_id=f"streamfill_stream__{JOB}", lease=lease)
        stack.callback(store.end_run, self.run_id, "succeeded")
        self.tracker = JobTracker(JOB, self.url, "stream", {"subscription": repr(TOPICS), "commit_to_group": None},
                                  generation=lease.generation)
        rows = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                           StructField("offset", LongType()), StructField("value", BinaryType()),
                           StructField("_error", StringType()), StructField("_raw", BinaryType())])
        self.plan = _plan({"table": SINK_TABLE, "job": JOB, "jobGeneration": str(lease.generation),
                           "deadLetters": "true", "url": self.url}, rows, False, streaming=True)
        snapshot = self.tracker.resume()
        self.next_offset = snapshot[TopicPartition(TOPICS[0], 0)]
        with store.engine.begin() as conn:  # the same table for every level: a commit into the same rows
            conn.execute(text(f'TRUNCATE "{SINK_TABLE}"'))

    def batch(self, counted: bool) -> None:
        """One micro-batch: plan, stage (not timed), commit, the source's commit hook."""
        from streamfill.connectors.kafka.enumerator import Plan
        from streamfill.connectors.spark.postgres_sink import _commit, _stage

        begin = self.next_offset
        start = {TopicPartition(t, 0): begin for t in TOPICS}
        ends = {tp: begin + PER for tp in start}
        # the broker's watermarks as the enumerator reports them: 800 offsets behind the log end after this batch
        plan = Plan([], {tp: (0, end + 800) for tp, end in ends.items()}, [],
                    {tp: (begin, end) for tp, end in ends.items()})
        t0 = time.perf_counter()
        self.tracker.record(plan, start=start, from_checkpoint=True)
        t1 = time.perf_counter()
        messages = [_stage(self.plan, iter([staged_rows(t, begin, dead=i == 0)])) for i, t in enumerate(TOPICS)]
        t2 = time.perf_counter()
        _commit(self.plan, messages, begin // PER)  # Spark's batch id: the batch's seq - 1, as in the history
        t3 = time.perf_counter()
        self.tracker.committed_by_spark(ends)
        t4 = time.perf_counter()
        self.next_offset = begin + PER
        if counted:
            for what, ms in (("plan", t1 - t0), ("commit", t3 - t2), ("hook", t4 - t3)):
                self.times[what].append(ms * 1000)


VALUES = pa.array([b'{"order": %d, "amount": 12.5, "currency": "EUR"}' % i for i in range(PER)], pa.binary())


def staged_rows(topic: str, first: int, dead: bool) -> pa.RecordBatch:
    """A task's rows of one topic's range [first, first + PER); with `dead`, its last row is a dead letter."""
    error = [None] * PER
    raw: list[bytes | None] = [None] * PER
    if dead:
        error[-1], raw[-1] = "amount below min 0: -1", b'{"amount": -1}'
    return pa.record_batch({"topic": pa.array([topic] * PER), "partition": pa.array([0] * PER, pa.int32()),
                            "offset": pa.array(range(first, first + PER), pa.int64()), "value": VALUES,
                            "_error": pa.array(error, pa.string()), "_raw": pa.array(raw, pa.binary())})


def measure_commits(main: Side, control: Side, warmup: int, repeat: int) -> None:
    """Batches of both sides, alternated: whatever the machine does meanwhile hits both alike."""
    with ExitStack() as stack:
        main.launch(stack)
        control.launch(stack)
        for i in range(warmup + repeat):
            for side in ((main, control) if i % 2 else (control, main)):
                side.batch(counted=i >= warmup)


def reset_control(url: str) -> None:
    """The empty side: its stream job forgotten and made again, with no batch, pinned at offset 0."""
    from streamfill.offsets_db.engine import shared_engine
    from streamfill.offsets_db.store import OffsetStore

    store = OffsetStore(shared_engine(url))
    store.forget_jobs([JOB])
    store.ensure_job(JOB, "stream", {"subscription": repr(TOPICS), "commit_to_group": None})
    store.pin_start(JOB, {TopicPartition(t, 0): 0 for t in TOPICS})


@contextmanager
def page_clock(at: datetime | None) -> Iterator[None]:
    """The page's `now` pinned to `at` (None: the real clock). The page reads its clock in data.py only; its
    windows are `now` minus 1h, 24h or 7d."""
    from streamfill.orchestration.ui import data

    if at is None:
        yield
        return

    class Pinned(datetime):
        @classmethod
        def now(cls, tz=None):
            return at if tz is None else at.astimezone(tz)

    real, data.datetime = data.datetime, Pinned
    try:
        yield
    finally:
        data.datetime = real


def page_paths(probe: int) -> list[tuple[str, str]]:
    """ui_queries' endpoints; its offset finder asks for one of this history's topics and an offset it holds."""
    out = []
    for what, path in endpoints(0):
        if "/find?" in path:
            path = path.split("?")[0] + f"?topic={TOPICS[0]}&partition=0&offset={probe}"
        out.append((what, path))
    return out


def measure_page(client, sides: list[tuple[str, datetime | None]], paths: list[tuple[str, str]],
                 repeat: int) -> dict[str, dict[str, float]]:
    """Median ms per endpoint per side ({side url: {endpoint: ms}}): every endpoint warmed once per side, then
    --repeat rounds, each round both sides one after the other (alternating which goes first)."""
    from streamfill.orchestration.ui import db

    def get(path: str) -> float:
        started = time.perf_counter()
        resp = client.get(path)
        spent = (time.perf_counter() - started) * 1000
        if resp.status_code != 200:
            raise SystemExit(f"{path} answered {resp.status_code}: {resp.text[:500]}")
        return spent

    times: dict[str, dict[str, list[float]]] = {url: {what: [] for what, _ in paths} for url, _ in sides}
    for url, clock in sides:
        db.use(url)
        with page_clock(clock):
            for _, path in paths:  # the pool's connection, the templates' compile
                get(path)
    for i in range(repeat):
        for url, clock in (sides if i % 2 else sides[::-1]):
            db.use(url)  # a new engine: its first request opens the connection and checks the revision
            with page_clock(clock):
                get(paths[0][1])
                for what, path in paths:
                    times[url][what].append(get(path))
    return {url: {what: statistics.median(ts) for what, ts in per.items()} for url, per in times.items()}


@dataclass
class Level:
    synthesized: int
    offsets_rows: int
    window_batches: int
    db_bytes: int
    plan: tuple[list[float], list[float]]  # (main, empty) ms
    commit: tuple[list[float], list[float]]
    hook: tuple[list[float], list[float]]
    page: tuple[dict[str, float], dict[str, float]]

    def ratio(self, what: str) -> float:
        main, empty = getattr(self, what)
        return statistics.median(main) / statistics.median(empty)

    def source(self) -> tuple[float, float]:
        """The source's per-batch offsets_db calls (plan + commit hook), median of the sums: (main, empty)."""
        return tuple(statistics.median(p + h for p, h in zip(*pair))  # type: ignore[return-value]
                     for pair in ((self.plan[0], self.hook[0]), (self.plan[1], self.hook[1])))

    def slowest(self) -> tuple[str, float, float]:
        """The page's slowest endpoint on the history: (endpoint, its median, its median on the empty side)."""
        what = max(self.page[0], key=self.page[0].get)
        return what, self.page[0][what], self.page[1][what]


def level_line(level: Level) -> str:
    commit, empty = (statistics.median(x) for x in level.commit)
    src, src_empty = level.source()
    what, page, page_empty = level.slowest()
    return (f"[bold]{level.synthesized:,}[/] batches: commit {commit:.1f} ms (empty {empty:.1f}, "
            f"x{commit / empty:.2f}); source plan + hook {src:.1f} ms (x{src / src_empty:.2f}); page's slowest "
            f"{what} {page:,.0f} ms (empty {page_empty:,.0f}, x{page / page_empty:.1f})")


def curve(levels: list[Level], repeat: int) -> Table:
    table = Table(title=f"offsets_db history vs an empty offsets_db (side by side, median of {repeat}; "
                        "x = ratio to the empty side)")
    for col in ("level (batches)", "batch_offsets rows", "db GB", "in 7d window", "commit ms", "commit p95",
                "x", "plan + hook ms", "x", "slowest page endpoint", "ms", "x", "x prev"):
        table.add_column(col, justify="left" if col == "slowest page endpoint" else "right")
    previous: Level | None = None
    for lv in levels:
        commit, commit_empty = lv.commit
        src, src_empty = lv.source()
        what, page, page_empty = lv.slowest()
        before = previous.page[0][what] if previous is not None else None
        table.add_row(f"{lv.synthesized:,}", f"{lv.offsets_rows:,}", f"{lv.db_bytes / 1e9:.2f}",
                      f"{lv.window_batches:,}", f"{statistics.median(commit):.1f}", f"{p95(commit):.1f}",
                      mark(statistics.median(commit) / statistics.median(commit_empty)), f"{src:.1f}",
                      mark(src / src_empty), what, f"{page:,.0f}", mark(page / page_empty),
                      f"{page / before:.2f}" if before else "")
        previous = lv
    return table


def mark(ratio: float) -> str:
    return f"[red]{ratio:.2f}[/]" if ratio > TARGET else f"{ratio:.2f}"


def per_endpoint(levels: list[Level]) -> Table:
    table = Table(title="the page per endpoint, median ms on the history (the empty side's in brackets)")
    table.add_column("endpoint")
    for lv in levels:
        table.add_column(f"{lv.synthesized:,}", justify="right")
    for what in levels[0].page[0]:
        table.add_row(what, *(f"{lv.page[0][what]:,.0f} ({lv.page[1][what]:,.0f})" for lv in levels))
    return table


def per_call(levels: list[Level]) -> Table:
    table = Table(title="the micro-batch's offsets_db calls, median / p95 ms on the history (x = ratio to empty)")
    table.add_column("call")
    for lv in levels:
        table.add_column(f"{lv.synthesized:,}", justify="right")
    for what, name in (("plan", "source: record the plan"), ("commit", "sink: driver commit"),
                       ("hook", "source: commit hook")):
        table.add_row(name, *(f"{statistics.median(getattr(lv, what)[0]):.1f} / {p95(getattr(lv, what)[0]):.1f} "
                              f"(x{lv.ratio(what):.2f})" for lv in levels))
    return table


def verdict(levels: list[Level]) -> str:
    top = levels[-1]
    what, page, page_empty = top.slowest()
    src, src_empty = top.source()
    checks = {"commit": top.ratio("commit"), "plan + hook": src / src_empty, f"page ({what})": page / page_empty}
    parts = [f"{name} x{r:.2f} {'within' if r <= TARGET else 'NOT within'}" for name, r in checks.items()]
    line = f"at {top.synthesized:,} batches, against an empty offsets_db (target {TARGET}x): " + "; ".join(parts)
    full = [lv for lv in levels if lv.synthesized >= WEEK_S]
    if len(full) >= 2:  # the same windows, more history: the page's own growth with history
        a, b = full[0], full[-1]
        line += (f". With its 7d window full at both, the page's slowest endpoint at {b.synthesized:,} is "
                 f"x{b.page[0][what] / a.page[0][what]:.2f} of {a.synthesized:,}")
    elif top.window_batches:
        line += (f". The page's windows hold {top.window_batches:,} batches here and none when empty: its ratio "
                 "is its windows' size, not history; 10^6 against 10^7 (7d window full at both) tells history")
    return line


def projection(steps: list[Step], max_wal: str) -> str:
    """Time and disk of a run to 10^7 batches, from the largest step measured (synthesis is set-based and
    append-only: it grows about linearly)."""
    step = max(steps, key=lambda s: s.batches)
    rate, per_batch = step.batches / step.seconds, step.bytes_added / step.batches
    total = 10_000_000
    return (f"projection to {total:,} batches from the step of {step.batches:,} ({rate:,.0f} batches/s with "
            f"its VACUUM, {per_batch:,.0f} bytes per batch): synthesis about {total / rate / 60:,.0f} min, the "
            f"database about {total * per_batch / 1e9:,.1f} GB (plus WAL up to max_wal_size {max_wal} while it "
            f"writes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)),
                    help="batches of history to measure at, increasing (default %(default)s)")
    ap.add_argument("--max", type=int, help="only the levels up to this many batches")
    ap.add_argument("--repeat", type=int, default=20, help="batches committed and page rounds per level")
    ap.add_argument("--warmup", type=int, default=2, help="batches committed per level before those measured")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="batches synthesized per transaction")
    args = ap.parse_args()
    wanted = sorted({int(x.replace("_", "")) for x in args.levels.split(",") if x.strip()})
    wanted = [n for n in wanted if args.max is None or n <= args.max]
    if not wanted:
        raise SystemExit("no level to measure (--levels, --max)")
    from streamfill.offsets_db.engine import dispose_shared
    from streamfill.orchestration.ui import db

    def close() -> None:
        dispose_shared()
        if db._engine is not None:
            db._engine.dispose()
            db._engine = None

    settings = get_settings()
    per_level = args.warmup + args.repeat
    # the timeline ends at the run's start, at the last batch the run makes (the last level's commits included)
    timeline = Timeline(datetime.now(timezone.utc).replace(microsecond=0), wanted[-1] + len(wanted) * per_level)
    levels: list[Level] = []
    steps: list[Step] = []
    # everything the run makes lives in two databases of its own; it touches no topic and no user table
    with scratch_database(settings, "streamfill_bench_growth", before_drop=close) as url, \
            scratch_database(settings, "streamfill_bench_growth_empty", before_drop=close) as empty_url:
        console.print(f"history in {make_url(url).database}, the empty side in {make_url(empty_url).database}; "
                      f"levels {', '.join(f'{n:,}' for n in wanted)}", highlight=False)
        job_id = setup(url)
        setup(empty_url)
        engine = create_engine(url)
        max_wal = scalar(engine, "SHOW max_wal_size")
        client = page_client()
        # Airflow's import sets the root logger to INFO on stdout: the figures would drown in request lines
        logging.getLogger().setLevel(logging.WARNING)
        main, control = Side(url), Side(empty_url)
        have = 0
        for level in wanted:
            if level > have:
                console.print(f"synthesizing batches {have + 1:,} to {level:,}", highlight=False)
                steps.append(synthesize(url, job_id, have, level, args.chunk, timeline))
                have = level
            measuring = time.perf_counter()
            reset_control(empty_url)
            newest = scalar(engine, "SELECT coalesce(max(seq), 0) FROM {batches} WHERE job_id = :j", j=job_id)
            clock = timeline.at(newest) + timedelta(seconds=1) if newest else None
            in_week = scalar(engine, "SELECT count(*) FROM {batches} WHERE job_id = :j AND planned_at >= :since",
                             j=job_id, since=(clock or timeline.anchor) - timedelta(seconds=WEEK_S))
            page = measure_page(client, [(url, clock), (empty_url, None)],
                                page_paths((newest // 2) * PER + 17), args.repeat)
            for side in (main, control):
                side.times = {k: [] for k in side.times}
            measure_commits(main, control, args.warmup, args.repeat)
            with engine.begin() as conn:  # this level's commits join the timeline after the history they followed
                run_sql(conn, REDATE, job_id=job_id, s1=newest + 1, s2=newest + per_level, **timeline.params())
            lv = Level(level, scalar(engine, "SELECT count(*) FROM {batch_offsets}"), in_week,
                       scalar(engine, "SELECT pg_database_size(current_database())"),
                       *((main.times[k], control.times[k]) for k in ("plan", "commit", "hook")),
                       (page[url], page[empty_url]))
            levels.append(lv)
            console.print(level_line(lv) + f"; measured in {time.perf_counter() - measuring:,.0f} s", highlight=False)
        engine.dispose()
        close()
    console.print(curve(levels, args.repeat))
    console.print(per_call(levels))
    console.print(per_endpoint(levels))
    console.print(verdict(levels), highlight=False)
    if steps and wanted[-1] < 10_000_000:
        console.print(projection(steps, max_wal), highlight=False)


if __name__ == "__main__":
    main()

"""offsets_db costs: what exactly-once adds to each micro-batch commit, and how fast the views answer.

1. Commit overhead: the `streamfill_postgres` driver commit with a job (rows moved + batch offsets + snapshot,
   one transaction) against the same commit without a job (rows moved only), side by side in the same run,
   at 1, 16 and 64 partitions, for an empty batch and a 10,000-row batch. Rows are staged first with the
   sink's own COPY path; only the driver's commit is timed. Overhead = median(with job) - median(without).
2. The staging table: UNLOGGED with the commit's count of staged rows (a crash empties an UNLOGGED table)
   against a logged stage, per batch of 10,000 and 100,000 rows, side by side.
3. View latency: each of docs/offsets-db.md's queries on a history of 1,000,000 batch-offset rows (median and p95).
Prints the three tables. Needs `streamfill stack up`; works in a scratch database it drops at the end.

    .venv/bin/python bench/commit_overhead.py [--batches 40] [--history-rows 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import pyarrow as pa
from cleanup import scratch_database
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, text

from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.postgres import stage, target_setup
from streamfill.connectors.postgres.connection import dsn
from streamfill.connectors.postgres.sink_options import SinkOptions
from streamfill.connectors.postgres.target import Column
from streamfill.connectors.spark.postgres_commit import commit
from streamfill.connectors.spark.postgres_plan import Lane, SinkPlan
from streamfill.connectors.spark.postgres_staging import stage_write
from streamfill.offsets_db.store import OffsetStore
from streamfill.settings import get_settings

console = Console()
COLUMNS = [Column("topic", "text"), Column("partition", "integer"), Column("offset", "bigint"),
           Column("value", "bytea")]
TARGET_MS = {"commit": 10.0, "view": 50.0}


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]


def rows_batch(partitions: int, count: int, first: int) -> pa.RecordBatch:
    """`count` rows spread over the partitions, each partition's offsets from `first` on: the range the batch
    planned for it (the commit checks that the staged rows are the batch's)."""
    return pa.record_batch({
        "topic": pa.array(["bench"] * count), "partition": pa.array([i % partitions for i in range(count)], pa.int32()),
        "offset": pa.array([first + i // partitions for i in range(count)], pa.int64()),
        "value": pa.array([b'{"order": %d, "amount": 12.5}' % i for i in range(count)], pa.binary())})


def stream_plan(conn, url: str, table: str, job: str | None) -> SinkPlan:
    """The plan the sink makes for a stream into a new `table` (with `job`, or an atomic write without one)."""
    key = ("topic", "partition", "offset")
    tgt = target_setup.prepare(conn, None, table, COLUMNS, key)
    stg = stage.stage_for(tgt, job or f"{table}-plain", dead_letters=False)
    stage.create(conn, stg, tgt, "stream", 86_400)
    options = SinkOptions(schema=None, table=table, mode="append-new", key=key, version=(), job=job,
                          dead_letters=False, evolve=False)
    return SinkPlan(url, options, (Lane(None, tgt, stg, options.mode, options.version),), own_stage=False,
                    ranged=job is not None)


def commit_bench(url: str, batches: int) -> Table:
    import psycopg2

    store = OffsetStore(url)
    table = Table(title=f"driver commit per micro-batch, ms (median / p95 of {batches})")
    for col in ("partitions", "rows", "without job", "with job", "overhead (median)", "ratio"):
        table.add_column(col, justify="right")
    for partitions in (1, 16, 64):
        for count in (0, 10_000):
            name = f"bench-{partitions}-{count}-{uuid.uuid4().hex[:6]}"
            timings: dict[bool, list[float]] = {True: [], False: []}
            conn = psycopg2.connect(dsn(url))
            plans = {}
            for with_job in (True, False):
                owner = name if with_job else name + "-plain"
                plans[with_job] = stream_plan(conn, url, f"t_{owner.replace('-', '_')}", name if with_job else None)
            conn.close()
            store.ensure_job(name, "stream")
            per = max(count // partitions, 0)
            for i in range(batches):
                for with_job in ((True, False) if i % 2 else (False, True)):  # alternated: noise hits both alike
                    plan = plans[with_job]
                    if with_job:
                        store.record_planned(name, [OffsetRange("bench", p, i * per, (i + 1) * per, 0, (i + 1) * per)
                                                    for p in range(partitions)])
                    rows = rows_batch(partitions, per * partitions, i * per)
                    messages = [stage_write(plan, iter([rows]))] if count else []
                    started = time.perf_counter()
                    commit(plan, messages, i)
                    timings[with_job].append((time.perf_counter() - started) * 1000)
            a, b = statistics.median(timings[False]), statistics.median(timings[True])
            table.add_row(str(partitions), f"{count:,}", f"{a:.1f} / {p95(timings[False]):.1f}",
                          f"{b:.1f} / {p95(timings[True]):.1f}", f"{b - a:.1f}", f"{b / a:.2f}")
    store.engine.dispose()
    return table


def stage_bench(url: str, batches: int) -> Table:
    """The staging table: UNLOGGED (a crash empties it, so the commit counts the staged rows) against a
    logged one (survives a crash, costs WAL on every COPY), per batch: the tasks' COPY plus the driver's
    commit, and the count check alone."""
    import psycopg2

    store = OffsetStore(url)
    table = Table(title=f"stage + commit per batch, ms (median of {batches}): UNLOGGED + count vs logged")
    for col in ("rows", "unlogged (with count)", "logged", "count alone", "logged / unlogged"):
        table.add_column(col, justify="right")
    for count in (10_000, 100_000):
        timings: dict[str, list[float]] = {"unlogged": [], "logged": [], "count": []}
        plans = {}
        conn = psycopg2.connect(dsn(url))
        for kind in ("unlogged", "logged"):
            name = f"stage-{kind}-{count}-{uuid.uuid4().hex[:6]}"
            plan = stream_plan(conn, url, f"t_{name.replace('-', '_')}", name)
            if kind == "logged":
                with conn.cursor() as cur:
                    cur.execute(f'ALTER TABLE "{plan.stage.name}" SET LOGGED')
                conn.commit()
            store.ensure_job(name, "stream")
            plans[kind] = (name, plan)
        for i in range(batches):
            for kind in (("unlogged", "logged") if i % 2 else ("logged", "unlogged")):
                name, plan = plans[kind]
                store.record_planned(name, [OffsetRange("bench", p, i * count // 16, (i + 1) * count // 16, 0,
                                                         (i + 1) * count // 16) for p in range(16)])
                started = time.perf_counter()
                message = stage_write(plan, iter([rows_batch(16, count, i * count // 16)]))
                if kind == "unlogged":
                    counted = time.perf_counter()
                    with conn.cursor() as cur:
                        stage.count(cur, plan.stage, [message.write_id])
                    conn.rollback()
                    timings["count"].append((time.perf_counter() - counted) * 1000)
                    started += time.perf_counter() - counted  # the commit counts again below
                commit(plan, [message], i)
                timings[kind].append((time.perf_counter() - started) * 1000)
        conn.close()
        u, g, c = (statistics.median(timings[k]) for k in ("unlogged", "logged", "count"))
        table.add_row(f"{count:,}", f"{u:.1f}", f"{g:.1f}", f"{c:.1f}", f"{g / u:.2f}")
    store.engine.dispose()
    return table


QUERIES = {
    "where is job X now": "SELECT * FROM latest_offsets WHERE job = :job",
    "what did batch N read": "SELECT * FROM offset_history WHERE job = :job AND batch_seq = :seq",
    "which batch read offset O of partition P": (
        "SELECT batch_seq FROM offset_history WHERE job = :job AND topic = 'orders' AND partition = 7 "
        "AND start_offset <= :offset AND end_offset > :offset"),
    "how far behind is each partition": "SELECT * FROM consumer_lag WHERE job = :job",
    "how the lag changed over the last hour": (
        "SELECT date_trunc('minute', planned_at) AS minute, max(behind) AS behind FROM lag_history "
        "WHERE job = :job AND planned_at > now() - interval '1 hour' GROUP BY 1 ORDER BY 1"),
    "... per partition (scans every partition's row)": (
        "SELECT date_trunc('minute', planned_at) AS minute, topic, partition, max(log_end - end_offset) AS behind "
        "FROM offset_history WHERE job = :job AND planned_at > now() - interval '1 hour' GROUP BY 1, 2, 3"),
}


def history(url: str, rows: int) -> dict:
    """Four jobs of 64 partitions; the measured one holds a quarter of the rows, planned over the last 2 hours."""
    engine = create_engine(url)
    per_job_batches = rows // 64 // 4
    with engine.begin() as conn:
        for j in range(4):
            job_id = conn.execute(text("INSERT INTO jobs (name, kind, config) VALUES (:n, 'stream', '{}') "
                                       "RETURNING id"), {"n": f"history-{j}"}).scalar()
            conn.execute(text(
                "INSERT INTO batches (job_id, seq, spark_batch_id, planned_at, committed_at, rows_written, behind) "
                "SELECT :job, s, s, now() - (:n - s) * interval '2 hours' / :n, "
                "now() - (:n - s) * interval '2 hours' / :n, 6400, 64 * 500 FROM generate_series(1, :n) s"),
                {"job": job_id, "n": per_job_batches})
            conn.execute(text(
                "INSERT INTO batch_offsets (batch_id, topic, partition, start_offset, end_offset, log_start, log_end) "
                "SELECT b.id, 'orders', p, (b.seq - 1) * 100, b.seq * 100, 0, b.seq * 100 + 500 "
                "FROM batches b, generate_series(0, 63) p WHERE b.job_id = :job"), {"job": job_id})
            conn.execute(text(
                "INSERT INTO snapshots (job_id, topic, partition, next_offset, batch_id) "
                "SELECT :job, 'orders', p, :n * 100, (SELECT max(id) FROM batches WHERE job_id = :job) "
                "FROM generate_series(0, 63) p"), {"job": job_id, "n": per_job_batches})
        conn.execute(text("ANALYZE"))
        total = conn.execute(text("SELECT count(*) FROM batch_offsets")).scalar()
    engine.dispose()
    return {"job": "history-2", "seq": per_job_batches // 2, "offset": per_job_batches * 50 + 17, "total": total}


def view_bench(url: str, rows: int, repeat: int = 30) -> Table:
    params = history(url, rows)
    total = params.pop("total")
    engine = create_engine(url)
    table = Table(title=f"view queries on {total:,} batch-offset rows, ms")
    for col in ("question", "rows returned", "median", "p95"):
        table.add_column(col, justify="right")
    with engine.connect() as conn:
        for question, sql in QUERIES.items():
            times, found = [], 0
            for _ in range(repeat):
                started = time.perf_counter()
                found = len(conn.execute(text(sql), params).all())
                times.append((time.perf_counter() - started) * 1000)
            table.add_row(question, str(found), f"{statistics.median(times):.2f}", f"{p95(times):.2f}")
    engine.dispose()
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--history-rows", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("commit", "views", "stage"), help="run one of the parts")
    args = ap.parse_args()
    from streamfill.offsets_db.engine import dispose_shared

    # everything the run makes (jobs, tables, stages) lives in a database of its own; it touches no topic
    with scratch_database(get_settings(), "bench", before_drop=dispose_shared) as url:
        if args.only in (None, "commit"):
            console.print(commit_bench(url, args.batches))
        if args.only in (None, "stage"):
            console.print(stage_bench(url, args.batches))
        if args.only in (None, "views"):
            console.print(view_bench(url, args.history_rows))
        console.print(f"targets: commit overhead <= {TARGET_MS['commit']:.0f} ms median at 64 partitions; "
                      f"each view query <= {TARGET_MS['view']:.0f} ms")

if __name__ == "__main__":
    main()

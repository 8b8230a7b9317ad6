"""The synthesized history of bench/growth.py: one stream job's batches, offsets, dead letters, quality results
and runs, made by set-based SQL in steps up to each level, then VACUUM ANALYZEd."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from rich.console import Console
from sqlalchemy import Engine, create_engine, text
from ui_queries import JOB

from streamfill.offsets_db import schema
from streamfill.partitions import TopicPartition

console = Console()
TOPICS = ("bench_orders", "bench_payments", "bench_refunds", "bench_shipments")
PER = 5_000  # offsets per topic per batch: 20,000 rows a batch over the 4 topics
DEAD_EVERY, QUALITY_EVERY = 5, 200  # a dead letter every 5th batch, a quality result every 200th
RUN_EVERY = 3 * 86_400  # batches per run: the stream is relaunched every 3 days
SINK_TABLE = "bench_growth_sink"

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

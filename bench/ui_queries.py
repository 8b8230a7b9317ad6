"""The streamfill page on a long history: every view and data endpoint of the page, timed in-process (the query,
the shaping and the HTML or JSON together) against a job of 100,000 batches.

The history is generated in a scratch database of the stack's PostgreSQL, dropped at the end: one stream job
with a batch every 6 s for the last --batches * 6 s (100,000 batches: about 7 days, so the 7d window holds them
all), 4 partitions each, a dead letter every 5th batch, a quality result every 200th, a few data-loss events,
and four other small jobs for the overview. Prints median and max of --repeat calls per endpoint; the page's
target is under a second for each. Needs `streamfill stack up`.

    .venv/bin/python bench/ui_queries.py [--batches 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cleanup import scratch_database
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, make_url, text

from streamfill.settings import get_settings

console = Console()
JOB, TOPIC, PARTITIONS, EVERY_S = "bench_orders", "bench_orders", 4, 6

HISTORY = [
    "INSERT INTO jobs (name, kind, config) SELECT :job, 'stream', '{}'::jsonb",
    "INSERT INTO jobs (name, kind, config) SELECT 'bench_other_' || i, 'backfill', '{}'::jsonb "
    "FROM generate_series(1, 4) i",
    "INSERT INTO runs (job_id, dag_id, airflow_run_id, status, started_at) SELECT j.id, 'streamfill_stream__' || "
    "j.name, 'manual__' || r, CASE WHEN r = 20 THEN 'running' ELSE 'lost' END, now() - (21 - r) * interval '8 h' "
    "FROM jobs j, generate_series(1, 20) r",
    # batch n planned (batches - n) * 6 s ago, committed 2 s later; its run the one started before it
    "INSERT INTO batches (job_id, seq, spark_batch_id, run_id, planned_at, committed_at, rows_written, dead_letters, "
    "behind) SELECT j.id, n, n, (SELECT max(r.id) FROM runs r WHERE r.job_id = j.id AND r.started_at <= "
    "now() - (:batches - n) * interval '6 s'), now() - (:batches - n) * interval '6 s', "
    "now() - (:batches - n) * interval '6 s' + interval '2 s', 4000 - (n % 5 = 0)::int, (n % 5 = 0)::int, "
    "(n % 97) * 40 FROM jobs j, generate_series(1, :batches) n WHERE j.name = :job",
    "INSERT INTO batch_offsets (batch_id, topic, partition, start_offset, end_offset, log_start, log_end) "
    "SELECT b.id, :topic, p, (b.seq - 1) * 1000, b.seq * 1000, 0, b.seq * 1000 + (b.seq % 97) * 10 "
    "FROM batches b JOIN jobs j ON j.id = b.job_id, generate_series(0, 3) p WHERE j.name = :job",
    "INSERT INTO snapshots (job_id, topic, partition, next_offset, batch_id) SELECT j.id, :topic, p, "
    ":batches * 1000, (SELECT max(id) FROM batches WHERE job_id = j.id) FROM jobs j, generate_series(0, 3) p "
    "WHERE j.name = :job",
    "INSERT INTO dead_letters (job_id, batch_id, topic, partition, \"offset\", raw_value, error, created_at) "
    "SELECT b.job_id, b.id, :topic, b.seq % 4, b.seq * 1000 - 1, convert_to('{\"amount\": -' || b.seq || '}', "
    "'UTF8'), (ARRAY['amount below min 0: -' || b.seq, 'invalid JSON', 'currency not in [EUR, USD]: XX' || b.seq % 7])"
    "[b.seq % 3 + 1], b.committed_at FROM batches b JOIN jobs j ON j.id = b.job_id "
    "WHERE j.name = :job AND b.seq % 5 = 0",
    "INSERT INTO quality_results (job_id, suite, table_name, success, statistics, result, checked_at) "
    "SELECT j.id, 'bench', 'bench_orders', n % 1000 <> 0, '{\"evaluated_expectations\": 12, "
    "\"successful_expectations\": 12}'::jsonb, jsonb_build_object('expectations', jsonb_build_array("
    "jsonb_build_object('expectation_type', 'expect_column_values_to_be_unique', 'success', n % 1000 <> 0, "
    "'kwargs', jsonb_build_object('column', 'event_id'), 'result', jsonb_build_object('unexpected_count', 3)))), "
    "now() - (:batches - n) * interval '6 s' FROM jobs j, generate_series(200, :batches, 200) n WHERE j.name = :job",
    "INSERT INTO data_loss_events (job_id, topic, partition, kind, lost_from, lost_to, detected_at) "
    "SELECT j.id, :topic, n % 4, 'aged out', n * 1000, n * 1000 + 50, now() - n * interval '1 min' "
    "FROM jobs j, generate_series(1, 5) n WHERE j.name = :job",
    "ANALYZE",
]


def generate(url: str, batches: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for sql in HISTORY:
            conn.execute(text(sql), {"job": JOB, "topic": TOPIC, "batches": batches})
    engine.dispose()


def endpoints(batches: int) -> list[tuple[str, str]]:
    """(what, path) of each view and data endpoint, under the app's own root."""
    probe = (batches // 2) * 1000 + 17  # an offset read by the batch in the middle
    out = [("overview page", "/"), ("jobs (JSON)", "/api/jobs")]
    for window in ("1h", "24h", "7d"):
        out += [(f"job page {window}", f"/jobs/{JOB}?window={window}"),
                (f"lag {window} (JSON)", f"/api/jobs/{JOB}/lag?window={window}"),
                (f"throughput {window} (JSON)", f"/api/jobs/{JOB}/throughput?window={window}")]
    out += [("dead letters page 7d", f"/jobs/{JOB}/dead-letters?window=7d"),
            ("dead letters 7d (JSON)", f"/api/jobs/{JOB}/dead-letters?window=7d"),
            ("quality 7d (JSON)", f"/api/jobs/{JOB}/quality?window=7d"),
            ("data loss (JSON)", f"/api/jobs/{JOB}/data-loss"),
            ("offset finder page", f"/jobs/{JOB}/find?topic={TOPIC}&partition=2&offset={probe}"),
            ("offset finder (JSON)", f"/api/jobs/{JOB}/find?topic={TOPIC}&partition=2&offset={probe}")]
    return out


def page_client():
    """The page's app in-process: the login and the per-DAG answers are Airflow's, left out; timed here is the
    page's own work."""
    from fastapi.testclient import TestClient

    from streamfill.orchestration.ui.access import Access
    from streamfill.orchestration.ui.auth import access, require_reader
    from streamfill.orchestration.ui.routes import create_app

    class EveryDag:
        """A user who may read every DAG's runs."""

        def readable(self, dag_ids: set[str]) -> set[str]:
            return set(dag_ids)

        def reads_every_dag(self) -> bool:
            return True

    app = create_app()
    app.dependency_overrides[require_reader] = lambda: None
    app.dependency_overrides[access] = lambda: Access(EveryDag())
    return TestClient(app)


def measure(url: str, batches: int, repeat: int) -> Table:
    from streamfill.orchestration.ui import db

    db.use(url)
    client = page_client()
    table = Table(title=f"streamfill page on a job of {batches:,} batches x {PARTITIONS} partitions, ms")
    for col in ("endpoint", "median", "max", "bytes"):
        table.add_column(col, justify="right" if col != "endpoint" else "left")
    for what, path in endpoints(batches):
        client.get(path)  # warm: the first call pays for the pool's connection and the template's compile
        times, size = [], 0
        for _ in range(repeat):
            start = time.perf_counter()
            resp = client.get(path)
            times.append((time.perf_counter() - start) * 1000)
            if resp.status_code != 200:
                raise SystemExit(f"{path} answered {resp.status_code}: {resp.text[:500]}")
            size = len(resp.content)
        median = statistics.median(times)
        shown = f"[red]{median:,.0f}[/]" if median >= 1000 else f"{median:,.0f}"
        table.add_row(what, shown, f"{max(times):,.0f}", f"{size:,}")
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from streamfill.orchestration.ui import db

    def close() -> None:
        if db._engine is not None:
            db._engine.dispose()

    # everything the run makes (jobs, tables, stages) lives in a database of its own; it touches no topic
    with scratch_database(get_settings(), "streamfill_bench_ui", before_drop=close) as url:
        start = time.perf_counter()
        generate(url, args.batches)
        console.print(f"generated {args.batches:,} batches in {time.perf_counter() - start:.1f} s "
                      f"({make_url(url).database})")
        console.print(measure(url, args.batches, args.repeat))

if __name__ == "__main__":
    main()

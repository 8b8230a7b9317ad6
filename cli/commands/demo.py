"""`make demo` (`streamfill demo`): the main job end to end through Airflow, with a summary from the tables and
offsets_db."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated

import typer
from rich.table import Table

from streamfill import dag_ids, extras
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.console import console, refusals, say
from streamfill.settings import Settings, get_settings

WINDOW_TABLE = "orders_window"
DOWNSTREAM_DAG = "streamfill_demo_revenue"  # dags/streamfill_demo_revenue.py


def demo(
    count: Annotated[int, typer.Option("--count", min=2, help="events to produce")] = 300_000,
    bad_ratio: Annotated[float, typer.Option("--bad-ratio", help="share of bad records")] = 0.01,
) -> None:
    """The main job through Airflow: produce events, trigger the stream DAG and a replay of a time window
    through Airflow's REST API, then show what landed, the offsets, the quality results and the UI."""
    with refusals():
        extras.require(extras.ALL, "`streamfill demo` (the local stack's Airflow, Spark and quality checks)")
        out = run(get_settings(), count, bad_ratio, say)
    table = Table(title="what landed")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, rows in out["tables"].items():
        table.add_row(name + (" (every demo run's window)" if name == WINDOW_TABLE else ""), f"{rows:,}")
    table.add_row(f"dead_letters (job {out['job']})", f"{out['dead_letters']:,}")
    console.print(table)
    offsets = Table(title=f"latest_offsets and consumer_lag of job {out['job']}")
    for col in ("partition", "next_offset", "lag"):
        offsets.add_column(col, justify="right")
    for partition, next_offset, lag in out["offsets"]:
        offsets.add_row(str(partition), f"{next_offset:,}", "-" if lag is None else f"{lag:,}")
    console.print(offsets)
    quality = Table(title="newest quality results (offsets_db.quality_results)")
    for col in ("checked at (UTC)", "job", "table", "result", "expectations met"):
        quality.add_column(col, overflow="fold")
    for checked_at, job, table_name, success, stats in out["quality"]:
        quality.add_row(f"{checked_at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S}", job or "-", table_name,
                        "[green]passed[/]" if success else "[red]failed[/]",
                        f"{stats.get('successful_expectations')} of {stats.get('evaluated_expectations')}")
    console.print(quality)
    downstream = Table(title=f"{DOWNSTREAM_DAG}: one run per announcement of the stream's commits")
    for col in ("partition key", "commits", "run", "orders", "revenue", "times processed"):
        downstream.add_column(col, justify="right")
    for key, commits, state, orders, revenue, times in out["downstream"]:
        downstream.add_row(key, commits, state, f"{orders:,}", f"{revenue:,.2f}", str(times))
    console.print(downstream)
    console.print(f"Airflow UI: {out['ui']} (login {out['login']}, password in {out['password_file']}). Offsets: "
                  f"`streamfill offsets history --job {out['job']}` or SQL on offset_history.", highlight=False)
    console.print(f"streamfill page (lag, throughput, dead letters, data loss, quality of every job): "
                  f"{page_url(out['ui'])} (the Airflow UI's streamfill entry; same login)", highlight=False)


def page_url(ui: str) -> str:
    """The streamfill page inside the Airflow UI (the plugin's nav entry, orchestration/ui/plugin.py)."""
    return f"{ui}/plugin/streamfill"


def _table(name: str):
    from sqlalchemy import table

    from streamfill.names import parse_table

    schema, bare = parse_table(name)
    return table(bare, schema=schema)


def _downstream(api, engine, spec, announced_before: int, say: Callable[[str], None]) -> list[tuple]:
    """Wait until the stream's commits are announced and the downstream DAG ran for each new announcement; its
    runs as (key, commits, state, orders, revenue, runs of the key)."""
    from sqlalchemy import text

    from streamfill.errors import AirflowError
    from streamfill.offsets_db import announcements
    from streamfill.offsets_db.announce_plan import commits_key, cover_problems

    deadline = time.monotonic() + 3 * spec.announce_every_s + 180
    say(f"waiting for the announcements of {spec.name}'s commits (every {spec.announce_every}) and "
        f"{DOWNSTREAM_DAG}'s runs")
    while True:
        done = announcements.announced(engine, spec.name)
        problems = cover_problems(announcements.commits(engine, spec.name), done)
        keys = [commits_key(spec.name, body["announcement"]) for body in done[announced_before:]]
        runs = {r["partition_key"]: r["state"] for r in api.call(
            "GET", f"/api/v2/dags/{DOWNSTREAM_DAG}/dagRuns?limit=100&order_by=-run_after")["dag_runs"]}
        if not problems and keys and all(runs.get(k) in ("success", "failed") for k in keys):
            break
        if time.monotonic() > deadline:
            raise AirflowError(f"the stream's commits were not all announced, or {DOWNSTREAM_DAG} did not run for "
                               f"each ({problems[:3] or keys}); is Airflow's triggerer up? `streamfill stack status`")
        time.sleep(2)
    with engine.connect() as conn:
        found = {r.announcement: r for r in conn.execute(text(
            "SELECT announcement, commits, orders, revenue, runs FROM orders_revenue WHERE announcement = ANY(:k)"),
            {"k": keys})}
    return [(k, found[k].commits if k in found else "-", runs[k], found[k].orders if k in found else 0,
             found[k].revenue if k in found else 0, found[k].runs if k in found else 0) for k in keys]


def run(settings: Settings, count: int, bad_ratio: float, say: Callable[[str], None]) -> dict:
    from sqlalchemy import func, select

    from streamfill.cli.stack.airflow import reserialize
    from streamfill.errors import AirflowError
    from streamfill.offsets_db import announcements, queries
    from streamfill.offsets_db.engine import make_engine
    from streamfill.orchestration.airflow_api import AirflowApi
    from streamfill.spark_jobs.demo.produce import ensure_topic, produce
    from streamfill.spark_jobs.pipelines import entry

    spec = entry("orders")  # another entry's being broken does not stop the demo
    kafka = settings.kafka_client()
    ensure_topic(kafka, spec.topic, 4)
    half = count // 2
    first = produce(kafka, spec.topic, half, bad_ratio=bad_ratio, seed=int(time.time()))
    time.sleep(1.0)
    window_start = datetime.now(timezone.utc)
    second = produce(kafka, spec.topic, count - half, bad_ratio=bad_ratio, seed=int(time.time()) + 1)
    window_end = datetime.now(timezone.utc)
    say(f"produced {first.total + second.total:,} events to {spec.topic} ({first.bad + second.bad:,} bad)")

    reserialize(settings)
    api = AirflowApi(settings)
    engine = make_engine(settings.offsets_db_url)
    announced_before = announcements.delivered_count(engine, spec.name)
    runs = [(dag_ids.stream(spec.name), {"trigger": "available-now"}),
            (dag_ids.REPLAY, {"job": spec.name, "from": window_start.isoformat(), "to": window_end.isoformat(),
                                   "mode": REPLACE, "table": WINDOW_TABLE})]
    for dag_id, conf in runs:
        run_id = api.trigger(dag_id, conf)
        say(f"triggered {dag_id} ({run_id}) through Airflow's REST API")
        state = api.wait(dag_id, run_id, on_state=lambda s, d=dag_id: say(f"  {d}: {s}"))
        if state != "success":
            raise AirflowError(f"{dag_id} run {run_id} {state}; its task logs are in the Airflow UI at {api.base}")

    try:
        downstream = _downstream(api, engine, spec, announced_before, say)
        with engine.connect() as conn:  # the demo's sink tables, names quoted by SQLAlchemy
            tables = {t: conn.scalar(select(func.count()).select_from(_table(t))) for t in (spec.table, WINDOW_TABLE)}
        summary = {"tables": tables, "dead_letters": queries.dead_letter_count(engine, spec.name), "job": spec.name,
                   "offsets": queries.offsets_with_lag(engine, spec.name),
                   "quality": queries.newest_quality_results(engine), "ui": api.base, "login": api.login[0],
                   "password_file": settings.airflow_password_file, "downstream": downstream}
    finally:
        engine.dispose()
    return summary

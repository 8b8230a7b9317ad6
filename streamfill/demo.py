"""`make demo`: the main job end to end through Airflow, with a summary from the tables and offsets_db."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import create_engine, text

from spark_jobs.produce import ensure_topic, produce
from streamfill.airflow_api import AirflowApi, AirflowError, reserialize
from streamfill.job_config import load
from streamfill.settings import Settings

WINDOW_TABLE = "orders_window"


def run(settings: Settings, count: int, bad_ratio: float, say: Callable[[str], None]) -> dict:
    spec = load()["orders"]
    bootstrap = settings.bootstrap_servers
    ensure_topic(bootstrap, spec.topic, 4)
    half = count // 2
    first = produce(bootstrap, spec.topic, half, bad_ratio=bad_ratio, seed=int(time.time()))
    time.sleep(1.0)
    window_start = datetime.now(timezone.utc)
    second = produce(bootstrap, spec.topic, count - half, bad_ratio=bad_ratio, seed=int(time.time()) + 1)
    window_end = datetime.now(timezone.utc)
    say(f"produced {first.total + second.total:,} events to {spec.topic} ({first.bad + second.bad:,} bad)")

    reserialize(settings)
    api = AirflowApi(settings)
    runs = [(f"streamfill_stream__{spec.name}", {"trigger": "available-now"}),
            ("streamfill_replay", {"job": spec.name, "from": window_start.isoformat(), "to": window_end.isoformat(),
                                   "mode": "replace", "table": WINDOW_TABLE})]
    for dag_id, conf in runs:
        run_id = api.trigger(dag_id, conf)
        say(f"triggered {dag_id} ({run_id}) through Airflow's REST API")
        state = api.wait(dag_id, run_id, on_state=lambda s, d=dag_id: say(f"  {d}: {s}"))
        if state != "success":
            raise AirflowError(f"{dag_id} run {run_id} {state}; its task logs are in the Airflow UI at {api.base}")

    engine = create_engine(settings.offsets_db_url)
    with engine.connect() as conn:
        tables = {t: conn.scalar(text(f'SELECT count(*) FROM "{t}"')) for t in (spec.table, WINDOW_TABLE)}
        dead = conn.scalar(text("SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                "WHERE j.name = :j"), {"j": spec.name})
        latest = conn.execute(text("SELECT l.partition, l.next_offset, c.lag FROM latest_offsets l LEFT JOIN "
                                   "consumer_lag c USING (job, topic, partition) WHERE l.job = :j "
                                   "ORDER BY l.partition"), {"j": spec.name}).all()
        quality = conn.execute(text("SELECT q.checked_at, j.name, q.table_name, q.success, q.statistics "
                                    "FROM quality_results q LEFT JOIN jobs j ON j.id = q.job_id "
                                    "ORDER BY q.id DESC LIMIT 5")).all()
    engine.dispose()
    return {"tables": tables, "dead_letters": dead, "job": spec.name, "offsets": [tuple(r) for r in latest],
            "quality": [tuple(r) for r in quality], "ui": api.base, "login": api.login}

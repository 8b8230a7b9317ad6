"""`make demo`: the main job end to end on the local stack, with a summary drawn from the tables and views."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import create_engine, text

from spark_jobs import backfill, stream
from spark_jobs.produce import ensure_topic, produce
from streamfill.settings import Settings

TOPIC, STREAM_JOB, STREAM_TABLE = "orders", "orders-stream", "orders_events"
WINDOW_JOB, WINDOW_TABLE = "orders-window", "orders_window"


def run(settings: Settings, spark, count: int, bad_ratio: float, say: Callable[[str], None]) -> dict:
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    ensure_topic(bootstrap, TOPIC, 4)
    half = count // 2
    first = produce(bootstrap, TOPIC, half, bad_ratio=bad_ratio, seed=int(time.time()))
    time.sleep(1.0)
    window_start = datetime.now(timezone.utc)
    second = produce(bootstrap, TOPIC, count - half, bad_ratio=bad_ratio, seed=int(time.time()) + 1)
    window_end = datetime.now(timezone.utc)
    say(f"produced {first.total + second.total:,} events to {TOPIC} ({first.bad + second.bad:,} bad)")

    checkpoint = settings.home / "checkpoints" / STREAM_JOB
    s = stream.run(stream.StreamArgs(STREAM_JOB, TOPIC, STREAM_TABLE, checkpoint, "available-now", 100_000),
                   spark, bootstrap, url, threading.Event(),
                   lambda p: say(f"  stream batch {p['batchId']}: {p['numInputRows']:,} records"))
    say(f"stream {STREAM_JOB}: {s.batches} batches, {s.rows:,} rows into {STREAM_TABLE}, "
        f"{s.dead_letters:,} dead letters, {s.seconds:.1f} s")

    args = backfill.BackfillArgs(WINDOW_JOB, TOPIC, window_start.isoformat(), window_end.isoformat(), WINDOW_TABLE,
                                 "replace", 100_000)
    b = backfill.run(args, spark, bootstrap, url)
    say(f"backfill {WINDOW_JOB} of [{window_start:%H:%M:%S}, {window_end:%H:%M:%S}) UTC: {b.offsets:,} offsets "
        f"in {b.chunks} chunks, {b.rows:,} rows into {WINDOW_TABLE}, {b.dead_letters:,} dead letters, "
        f"{b.seconds:.1f} s")

    engine = create_engine(url)
    with engine.connect() as conn:
        totals = {t: conn.scalar(text(f'SELECT count(*) FROM "{t}"')) for t in (STREAM_TABLE, WINDOW_TABLE)}
        dead = conn.scalar(text("SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                "WHERE j.name = :j"), {"j": STREAM_JOB})
        latest = conn.execute(text("SELECT topic, partition, next_offset FROM latest_offsets WHERE job = :j "
                                   "ORDER BY partition"), {"j": STREAM_JOB}).all()
        lag = conn.execute(text("SELECT partition, lag FROM consumer_lag WHERE job = :j ORDER BY partition"),
                           {"j": STREAM_JOB}).all()
    engine.dispose()
    return {"tables": totals, "dead_letters": dead, "latest_offsets": [tuple(r) for r in latest],
            "lag": [tuple(r) for r in lag]}

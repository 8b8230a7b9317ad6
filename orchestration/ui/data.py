"""What each view of the page shows, built from offsets_db's page queries and the jobs file's entries: plain
dicts and lists that the HTML templates render and the JSON endpoints return as they are."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine

from streamfill.errors import StreamfillError
from streamfill.names import validate_job_name
from streamfill.offsets_db import dashboard
from streamfill.orchestration.jobs_file_variable import jobs_file
from streamfill.orchestration.stream_health import commit_too_old, health_problems, lags_too_far
from streamfill.orchestration.ui import db
from streamfill.orchestration.ui import format as fmt
from streamfill.orchestration.ui.access import Access, entry_of
from streamfill.spark_jobs.pipelines import PipelineSpec, load_each

DEFAULT_KEY = ["topic", "partition", "offset"]
OVERVIEW_LIMIT = 200  # jobs on the overview unless the page asks for more (?limit=)


class NotFound(StreamfillError):
    """A job or an offset the page cannot show; the message names it and what exists."""


def entries() -> tuple[dict[str, PipelineSpec], str | None]:
    """The jobs file's entries that can be read, and why the others could not (the page still shows offsets_db
    without them; one broken entry hides no other's)."""
    try:
        found = load_each(jobs_file())
    except StreamfillError as exc:
        return {}, str(exc)
    return dict(found.specs), "; ".join(str(b.error) for b in found.broken) or None


def run_link(ui_root: str, dag_id: str | None, run_id: str | None) -> str | None:
    """The Airflow UI's page of the DAG run that launched a job's run, when Airflow launched it."""
    if not dag_id or not run_id:
        return None
    return f"{ui_root}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def log_ends(partitions: set[tuple[str, int]]) -> tuple[dict[tuple[str, int], int] | None, str | None]:
    """The broker's log end now for these partitions (metadata, then one batched request; 5 s at most each), or
    None and why not: the page then shows the lag measured at each job's last planning."""
    if not partitions:
        return {}, None
    from confluent_kafka import KafkaException

    from streamfill.connectors.kafka.broker import Broker
    from streamfill.partitions import TopicPartition

    try:
        broker = Broker(db.kafka(), timeout_s=5)
        exists = broker.topics()  # a deleted topic or partition has no log end: its job keeps the planned lag
        found = broker.watermarks([TopicPartition(t, p) for t, p in sorted(partitions) if p < exists.get(t, 0)])
    except (StreamfillError, KafkaException) as exc:
        return None, str(exc)
    return {(tp.topic, tp.partition): high for tp, (_, high) in found.items()}, None


def overview(engine: Engine, ui_root: str, now: datetime | None = None, limit: int = OVERVIEW_LIMIT,
             access: Access | None = None) -> dict[str, Any]:
    """The first `limit` jobs the user may see (the jobs file's entries, then the most recently active), each
    with its lag now."""
    now = now or datetime.now(timezone.utc)
    specs, jobs_error = entries()
    shown = access.jobs(engine, specs) if access is not None else None
    found = dashboard.overview(engine, now, sorted(specs), limit=limit,
                               only=None if shown is None else sorted(shown)) if shown is None or shown else []
    positions = dashboard.next_offsets(engine, [r["name"] for r in found])
    windows = {r["name"]: fmt.window_of(r["config"]) if r["kind"] == "backfill" else None for r in found}
    ends, broker_error = log_ends({tp for r in found if windows[r["name"]] is None
                                   for tp in positions.get(r["name"], {})})
    rows = []
    for r in found:
        spec = specs.get(r["name"])
        now_lag = fmt.lag_now(positions.get(r["name"], {}), ends, windows[r["name"]])
        if now_lag is not None:
            r["total_lag"], r["max_lag"] = now_lag
        problems: list[str] = []
        stale = lagging = False
        if spec is not None:
            max_age = timedelta(minutes=spec.health.max_commit_age_minutes)
            caught_up = now_lag is not None and now_lag[0] == 0  # a quiet topic: nothing to commit
            problems = health_problems(r["name"], r["last_commit"], r["max_lag"], max_age, spec.health.max_lag, now,
                                       caught_up)
            stale = not caught_up and commit_too_old(r["last_commit"], max_age, now)
            lagging = lags_too_far(r["max_lag"], spec.health.max_lag)
        rows.append({
            "name": r["name"], "kind": r["kind"], "entry": spec is not None,
            "state": r["status"] or "no run", "run_link": run_link(ui_root, r["dag_id"], r["airflow_run_id"]),
            "last_commit": fmt.iso(r["last_commit"]), "commit_age": fmt.age(r["last_commit"], now),
            "total_lag": r["total_lag"], "max_lag": r["max_lag"],
            "lag_measured": "now" if now_lag is not None else "at the last planning",
            "rows_hour": r["rows_hour"] or 0,
            "dead_hour": r["dead_hour"] or 0,
            "quality": None if r["quality_ok"] is None else ("passed" if r["quality_ok"] else "failed"),
            "quality_age": fmt.age(r["quality_at"], now) if r["quality_at"] else None,
            "data_loss": r["data_loss"], "problems": problems, "stale": stale, "lagging": lagging,
            "health": None if spec is None else {"max_commit_age_minutes": spec.health.max_commit_age_minutes,
                                                 "max_lag": spec.health.max_lag},
        })
    total = len(shown) if shown is not None else dashboard.job_count(engine) if len(found) >= limit else len(found)
    return {"jobs": rows, "jobs_error": jobs_error, "now": fmt.iso(now), "shown": len(rows), "total": total,
            "limit": limit, "broker_error": broker_error}


def job_row(engine: Engine, name: str, access: Access | None = None) -> dict[str, Any]:
    """The job's row; NotFound when offsets_db has no such job or the user may not see it (the same answer, so
    a job's name says nothing about it to whoever may not read its DAGs)."""
    validate_job_name(name)
    specs = entries()[0] if access is not None else {}
    found = dashboard.job(engine, name) if access is None or access.may_see(engine, specs, name) else None
    if found is None:
        shown = access.jobs(engine, specs) if access is not None else None
        known = [r["name"] for r in dashboard.overview(engine, datetime.now(timezone.utc), [], limit=20)] \
            if shown is None else sorted(shown)[:20]
        mine = "" if shown is None else " or is not one you may see (Airflow lets you read none of its DAGs)"
        raise NotFound(f"job {name!r} is not in offsets_db{mine}; known jobs: {', '.join(known) or 'none yet'}")
    return found


def lag(engine: Engine, name: str, window: timedelta, now: datetime | None = None,
        batches: int | None = None) -> dict[str, Any]:
    """Plotly traces: trace 0 the total lag, one point per batch (or per bucket); then one per partition.
    `batches`: the window's batch count when the caller has it."""
    since = (now or datetime.now(timezone.utc)) - window
    batches = dashboard.batch_count(engine, name, since) if batches is None else batches
    bucket = fmt.bucket_for(window, batches)
    series = dashboard.lag_series(engine, name, since, bucket)
    traces = [{"name": "total", "x": [fmt.iso(t) for t, _ in series["total"]],
               "y": [v for _, v in series["total"]], "mode": "lines+markers", "line": {"width": 3}}]
    for (topic, partition), points in sorted(series["partitions"].items()):
        traces.append({"name": f"{topic}-{partition}", "x": [fmt.iso(t) for t, _ in points],
                       "y": [v for _, v in points], "mode": "lines+markers"})
    return {"batches": batches, "bucket_seconds": None if bucket is None else int(bucket.total_seconds()),
            "traces": traces}


def throughput(engine: Engine, name: str, window: timedelta, now: datetime | None = None,
               batches: int | None = None) -> dict[str, Any]:
    """Plotly traces of offsets/s and rows/s per committed batch (one batch per bucket on a long window), over
    its time from planning to commit."""
    since = (now or datetime.now(timezone.utc)) - window
    bucket = fmt.bucket_for(window, dashboard.batch_count(engine, name, since) if batches is None else batches)
    points = dashboard.throughput_series(engine, name, since, bucket)
    x = [fmt.iso(p["committed_at"]) for p in points]
    traces = [{"name": "offsets/s", "x": x, "y": [fmt.per_second(p["offsets"], p["seconds"]) for p in points],
               "mode": "lines+markers"},
              {"name": "rows/s", "x": x, "y": [fmt.per_second(p["rows_written"], p["seconds"]) for p in points],
               "mode": "lines+markers"},
              {"name": "dead letters per batch", "x": x, "y": [p["dead_letters"] for p in points], "type": "bar",
               "yaxis": "y2", "opacity": 0.4}]
    return {"points": len(points), "bucket_seconds": None if bucket is None else int(bucket.total_seconds()),
            "traces": traces}


def dead_letters(engine: Engine, job_id: int, window: timedelta, samples: int = 3,
                 now: datetime | None = None) -> list[dict[str, Any]]:
    since = (now or datetime.now(timezone.utc)) - window
    out = []
    for group in dashboard.dead_letter_reasons(engine, job_id, since, samples=samples):
        out.append({"reason": group["reason"], "count": group["count"], "newest": fmt.iso(group["newest"]),
                    "samples": [{"topic": s["topic"], "partition": s["partition"], "offset": s["offset"],
                                 "error": s["error"], "value": fmt.safe_bytes(s["raw_value"])}
                                for s in group["samples"]]})
    return out


def data_loss(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    return [{**e, "detected_at": fmt.iso(e["detected_at"])} for e in dashboard.data_loss_events(engine, job_id)]


def quality(engine: Engine, job_id: int, window: timedelta, now: datetime | None = None) -> list[dict[str, Any]]:
    since = (now or datetime.now(timezone.utc)) - window
    return [{"checked_at": fmt.iso(q["checked_at"]), "suite": q["suite"], "table": q["table_name"],
             "success": q["success"], "evaluated": (q["statistics"] or {}).get("evaluated_expectations"),
             "successful": (q["statistics"] or {}).get("successful_expectations"), "failing": q["failing"]}
            for q in dashboard.quality_results(engine, job_id, since)]


def sink_of(job: dict[str, Any], specs: dict[str, PipelineSpec]) -> tuple[str | None, list[str]]:
    """The job's table and key: a backfill's recorded table, else its entry's (a window or replay job is named
    after its entry: `orders.interval...`, `orders.replay...`)."""
    spec = entry_of(job["name"], specs)
    recorded = ((job.get("config") or {}).get("backfill") or {}).get("table")
    table = recorded or (spec.table if spec is not None else None)
    return table, list(spec.key) if spec is not None else DEFAULT_KEY


def find(engine: Engine, job: dict[str, Any], ui_root: str, topic: str, partition: int,
         offset: int) -> dict[str, Any]:
    """Which batch and run of the job read (topic, partition, offset), and the key of the row it became (or the
    dead letter it became)."""
    batches = dashboard.find_offset(engine, job["name"], topic, partition, offset)
    for b in batches:
        b["run_link"] = run_link(ui_root, b["dag_id"], b["airflow_run_id"])
        b["planned_at"], b["committed_at"] = fmt.iso(b["planned_at"]), fmt.iso(b["committed_at"])
    table, key = sink_of(job, entries()[0])
    row, row_error = None, None
    if table is not None:
        try:
            row = dashboard.row_key(engine, table, key, topic, partition, offset)
        except Exception as exc:  # a table gone or changed is shown, not raised
            row_error = f"cannot read {table}: {str(exc).splitlines()[0]}"
    dead = dashboard.dead_letter_at(engine, job["id"], topic, partition, offset)
    return {"topic": topic, "partition": partition, "offset": offset, "batches": batches, "table": table,
            "key": key, "row": row, "row_error": row_error,
            "dead_letter": None if dead is None else {"error": dead["error"],
                                                      "created_at": fmt.iso(dead["created_at"])}}

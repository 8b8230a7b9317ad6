"""The `streamfill` command."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from streamfill import stack
from streamfill.settings import get_settings

app = typer.Typer(no_args_is_help=True, help="Kafka batch-plus-streaming on PySpark, Airflow and PostgreSQL.")
stack_app = typer.Typer(no_args_is_help=True, help="The local stack: PostgreSQL, Kafka, Airflow, Spark.")
app.add_typer(stack_app, name="stack")
db_app = typer.Typer(no_args_is_help=True, help="offsets_db in PostgreSQL.")
app.add_typer(db_app, name="db")
offsets_app = typer.Typer(no_args_is_help=True, help="What a job read and where it stands, from offsets_db.")
app.add_typer(offsets_app, name="offsets")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"

console = Console(soft_wrap=True)  # long lines stay whole in logs (Airflow, CI)
err = Console(stderr=True, soft_wrap=True)


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"[bold red]error:[/] {exc}", highlight=False)
    return typer.Exit(1)


@stack_app.command("up")
def stack_up() -> None:
    """Install what is missing, start every service and wait until each answers a real request."""
    settings = get_settings()
    try:
        statuses = stack.up(settings, say=lambda m: console.print(m, highlight=False))
    except stack.StackError as exc:
        raise _fail(exc) from None
    _print_status(statuses)


@stack_app.command("down")
def stack_down() -> None:
    """Stop the services that `stack up` started."""
    stack.down(get_settings(), say=lambda m: console.print(m, highlight=False))


@stack_app.command("status")
def stack_status() -> None:
    """Each service with its address, process id and health; exit code 1 when one is not healthy."""
    statuses = stack.status(get_settings())
    _print_status(statuses)
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head", help="Alembic revision to upgrade to")) -> None:
    """Apply offsets_db migrations to STREAMFILL_DB_URL (the local stack's database by default)."""
    from sqlalchemy.exc import OperationalError

    from offsets_db.migrate import upgrade

    url = get_settings().offsets_db_url
    try:
        upgrade(url, revision)
    except OperationalError as exc:
        raise _unreachable(url, exc) from None
    console.print(f"offsets_db at {_safe(url)} is at revision {revision}")


JobOpt = Annotated[str, typer.Option("--job", help="the job name (the source's job option)")]
TopicOpt = Annotated[Optional[str], typer.Option("--topic", help="only this topic")]
SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help="only rows from this time on: ISO-8601 (2026-11-22T10:00:00+00:00) or an age (30m, 2h, 1d)")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table or json")]


@offsets_app.command("history")
def offsets_history(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None,
                    format: FormatOpt = OutputFormat.table,
                    limit: Annotated[int, typer.Option(min=1, help="newest rows shown")] = 1000) -> None:
    """Every planned range of the job, newest batch first (view offset_history)."""
    _show_offsets("history", job, topic, since, format, limit)


@offsets_app.command("latest")
def offsets_latest(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None,
                   format: FormatOpt = OutputFormat.table) -> None:
    """Where the job resumes: the next offset per partition (view latest_offsets)."""
    _show_offsets("latest", job, topic, since, format, 100_000)


@offsets_app.command("lag")
def offsets_lag(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None,
                format: FormatOpt = OutputFormat.table) -> None:
    """How far behind the log end the job was at its last planning, per partition (view consumer_lag)."""
    _show_offsets("lag", job, topic, since, format, 100_000)


def parse_since(raw: str | None, now: datetime | None = None) -> datetime | None:
    """An ISO-8601 instant (UTC when it has no offset) or an age such as 30m, 2h or 1d."""
    if raw is None:
        return None
    now = now or datetime.now(timezone.utc)
    m = re.fullmatch(r"\s*(\d+)\s*(s|m|h|d)\s*", raw)
    if m:
        return now - timedelta(seconds=int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise typer.BadParameter(f"{raw!r} is neither an ISO-8601 time nor an age; use e.g. "
                                 "2026-11-22T10:00:00+00:00 or 2h", param_hint="--since") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _show_offsets(view: str, job: str, topic: str | None, since: str | None, fmt: OutputFormat,
                  limit: int) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    from offsets_db import queries

    when = parse_since(since)
    url = get_settings().offsets_db_url
    engine = create_engine(url)
    try:
        found = queries.rows(engine, view, job, topic, when, limit)
    except (queries.UnknownJob, ValueError) as exc:
        raise _fail(exc) from None
    except OperationalError as exc:
        raise _unreachable(url, exc) from None
    finally:
        engine.dispose()
    if fmt is OutputFormat.json:
        print(json.dumps(found, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v), indent=1))
        return
    table = Table(title=f"{view} of job {job}" + (f", topic {topic}" if topic else "") + " (times in UTC)")
    for col in queries.VIEWS[view][0]:
        table.add_column(col, justify="right" if col not in ("topic",) and not col.endswith("_at") else "left")
    for row in found:
        table.add_row(*("-" if v is None else v.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
                        if isinstance(v, datetime) else str(v) for v in row.values()))
    console.print(table)
    if not found:
        console.print("no rows" + (" for this topic" if topic else "") + (" since then" if since else ""))


@app.command("produce")
def produce_cmd(
    topic: Annotated[str, typer.Option("--topic", help="created when missing")],
    count: Annotated[int, typer.Option("--count", help="events to send")],
    rate: Annotated[Optional[float], typer.Option("--rate", help="events per second; full speed when left out")] = None,
    partitions: Annotated[Optional[int], typer.Option("--partitions", help="partitions of a new topic (1)")] = None,
    bad_ratio: Annotated[float, typer.Option("--bad-ratio", help="share of bad records, 0..1")] = 0.0,
    key_field: Annotated[str, typer.Option("--key-field", help="event field used as the Kafka key, or none")] = "user_id",
    seed: Annotated[int, typer.Option("--seed", help="the same seed sends the same events")] = 7,
) -> None:
    """Send demo order events to Kafka; bad ones are invalid JSON, miss fields, have wrong types or ranges."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from connectors.kafka.errors import BrokerError
    from spark_jobs import produce

    key = None if key_field.lower() == "none" else key_field
    bootstrap = get_settings().bootstrap_servers
    try:
        produce.check_args(count, rate, partitions, bad_ratio, key)
        have = produce.ensure_topic(bootstrap, topic, partitions)
        with Progress(TextColumn("sending to {task.fields[topic]}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("produce", total=count, topic=topic)
            done = produce.produce(bootstrap, topic, count, rate=rate, bad_ratio=bad_ratio, key_field=key,
                                   seed=seed, on_progress=lambda n: bar.advance(task, n))
    except (ValueError, BrokerError) as exc:
        raise _fail(exc) from None
    console.print(f"{done.total:,} events to {topic} ({have} partitions): {done.valid:,} valid, {done.bad:,} bad, "
                  f"{done.seconds:.1f} s ({done.total / max(done.seconds, 1e-9):,.0f} events/s)")


MasterOpt = Annotated[Optional[str], typer.Option("--master", help="Spark master URL (STREAMFILL_SPARK_MASTER)")]


def _spark(app_name: str, master: str | None):
    from spark_jobs.session import spark_session

    settings = get_settings()
    if master:
        settings = settings.model_copy(update={"spark_master": master})
    return spark_session(app_name, settings, {"spark.ui.showConsoleProgress": "false"})


@app.command("stream")
def stream_cmd(
    job: JobOpt,
    topic: Annotated[str, typer.Option("--topic", help="Kafka topic of JSON order events")],
    table: Annotated[str, typer.Option("--table", help="target table (schema.table allowed); created when missing")],
    trigger: Annotated[str, typer.Option("--trigger", help="available-now, or an interval such as 5s")] = "5s",
    max_offsets_per_trigger: Annotated[Optional[int], typer.Option(
        "--max-offsets-per-trigger", min=1, help="at most this many offsets per micro-batch")] = None,
    checkpoint: Annotated[Optional[str], typer.Option(
        "--checkpoint", help="Spark checkpoint directory (default: STREAMFILL_HOME/checkpoints/JOB)")] = None,
    master: MasterOpt = None,
) -> None:
    """Kafka into Postgres, exactly-once, until stopped (SIGTERM or Ctrl-C finish the batch in flight)."""
    import signal
    import threading
    from pathlib import Path

    from sqlalchemy.exc import OperationalError

    from offsets_db.names import validate_job_name
    from spark_jobs import stream

    settings = get_settings()
    try:
        validate_job_name(job)
        stream.parse_trigger(trigger)
    except ValueError as exc:
        raise _fail(exc) from None
    args = stream.StreamArgs(job, topic, table, Path(checkpoint) if checkpoint else settings.home / "checkpoints" / job,
                             trigger, max_offsets_per_trigger)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = _spark(f"streamfill-stream-{job}", master)

    def show(p: dict) -> None:
        sink = p.get("sink", {}).get("numOutputRows", -1)
        console.print(f"batch {p['batchId']}: {p['numInputRows']:,} records read"
                      + (f", {sink:,} rows out" if sink >= 0 else "")
                      + f", {p.get('processedRowsPerSecond', 0):,.0f} records/s", highlight=False)

    try:
        summary = stream.run(args, spark, settings.bootstrap_servers, settings.offsets_db_url, stop, show)
    except (ValueError, RuntimeError) as exc:
        raise _fail(exc) from None
    except OperationalError as exc:
        raise _unreachable(settings.offsets_db_url, exc) from None
    finally:
        spark.stop()
    console.print(f"stream {job} {summary.status} after {summary.seconds:.1f} s: {summary.batches} batches "
                  f"committed, {summary.rows:,} rows into {table}, {summary.dead_letters:,} dead letters")


@app.command("backfill")
def backfill_cmd(
    job: JobOpt,
    topic: Annotated[str, typer.Option("--topic", help="Kafka topic of JSON order events")],
    frm: Annotated[str, typer.Option("--from", help="earliest, latest, per-partition JSON or an ISO-8601 time")],
    to: Annotated[str, typer.Option("--to", help="earliest, latest, per-partition JSON or an ISO-8601 time")],
    table: Annotated[Optional[str], typer.Option("--table", help="target table (default: JOB with - and . as _)")] = None,
    mode: Annotated[str, typer.Option("--mode", help="append-new (keep existing rows) or replace (upsert)")] = "append-new",
    chunk_size: Annotated[int, typer.Option("--chunk-size", help="offsets per exactly-once chunk")] = 500_000,
    master: MasterOpt = None,
) -> None:
    """Reprocess a past range into Postgres: planned and recorded first, committed chunk by chunk, resumable."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from connectors.kafka.broker import Broker
    from pyspark.errors import PySparkException
    from sqlalchemy.exc import OperationalError

    from connectors.kafka.errors import ConnectorError
    from offsets_db.names import validate_job_name
    from offsets_db.store import OffsetStore
    from spark_jobs import backfill

    settings = get_settings()
    try:
        validate_job_name(job)
    except ValueError as exc:
        raise _fail(exc) from None
    args = backfill.BackfillArgs(job, topic, frm, to, table or re.sub(r"[-.]", "_", job), mode, chunk_size)
    try:
        # every check against the broker and offsets_db before Spark starts
        backfill.check_job(args, OffsetStore(settings.offsets_db_url))
        backfill.resolve(args, Broker({"bootstrap.servers": settings.bootstrap_servers}))
    except (ValueError, ConnectorError) as exc:
        raise _fail(exc) from None
    except OperationalError as exc:
        raise _unreachable(settings.offsets_db_url, exc) from None
    spark = _spark(f"streamfill-backfill-{job}", master)
    columns = (TextColumn("backfill {task.fields[job]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("offsets, {task.fields[rate]} offsets/s"), TimeRemainingColumn())
    try:
        with Progress(*columns, console=err) as bar:
            task = bar.add_task("backfill", total=None, job=job, rate="-")
            first: tuple[float, int] | None = None  # when and where this launch started

            def advance(done: int, total: int) -> None:
                nonlocal first
                first = first or (time.monotonic(), done)
                elapsed = time.monotonic() - first[0]
                rate = f"{(done - first[1]) / elapsed:,.0f}" if elapsed > 0 and done > first[1] else "-"
                bar.update(task, completed=done, total=total, rate=rate)

            summary = backfill.run(args, spark, settings.bootstrap_servers, settings.offsets_db_url, advance)
    except (ValueError, ConnectorError) as exc:
        raise _fail(exc) from None
    except PySparkException as exc:
        raise _fail(RuntimeError(f"{_first_lines(exc)}\nCommitted chunks stay committed; re-run the same command "
                                 "to continue")) from None
    finally:
        spark.stop()
    _print_backfill(summary, args.table)


@app.command("demo")
def demo_cmd(
    count: Annotated[int, typer.Option("--count", min=2, help="events to produce")] = 300_000,
    bad_ratio: Annotated[float, typer.Option("--bad-ratio", help="share of bad records")] = 0.01,
) -> None:
    """The main job through Airflow: produce events, trigger the stream DAG and a replay of a time window
    through Airflow's REST API, then show what landed, the offsets, the quality results and the UI."""
    from connectors.kafka.errors import BrokerError
    from streamfill import demo
    from streamfill.airflow_api import AirflowError

    try:
        out = demo.run(get_settings(), count, bad_ratio, lambda m: console.print(m, highlight=False))
    except (AirflowError, BrokerError, ValueError) as exc:
        raise _fail(exc) from None
    table = Table(title="what landed")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, rows in out["tables"].items():
        table.add_row(name + (" (every demo run's window)" if name == "orders_window" else ""), f"{rows:,}")
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
    console.print(f"Airflow UI: {out['ui']} (login {out['login'][0]} / {out['login'][1]}). Offsets: "
                  f"`streamfill offsets history --job {out['job']}` or SQL on offset_history.", highlight=False)


def _first_lines(exc: Exception, n: int = 6) -> str:
    """Spark's errors carry a JVM stack; the cause people need is in the first lines."""
    lines = [l for l in str(exc).splitlines() if l.strip() and not l.lstrip().startswith("at ")]
    return "\n".join(lines[:n])


def _print_backfill(summary, table_name: str) -> None:
    if summary.state == "complete":
        console.print(f"backfill {summary.job} already complete: its plan was fully committed before and "
                      "append-new would change nothing (use --mode replace to rewrite)")
    console.print(f"backfill {summary.job} ({summary.state}) into {table_name}:", highlight=False)
    table = Table()
    for col in ("partition", "from", "to", "offsets"):
        table.add_column(col, justify="right")
    for key, (start, end) in summary.ranges.items():
        table.add_row(key, str(start), str(end), f"{end - start:,}")
    console.print(table)
    rate = summary.offsets / summary.seconds if summary.seconds else 0
    console.print(f"{summary.offsets:,} offsets in {summary.chunks} chunks: {summary.rows:,} rows, "
                  f"{summary.dead_letters:,} dead letters, {summary.seconds:.1f} s ({rate:,.0f} offsets/s)")


def _unreachable(url: str, exc) -> typer.Exit:
    reason = " ".join(str(getattr(exc, "orig", exc)).split())
    return _fail(RuntimeError(f"cannot reach offsets_db at {_safe(url)}: {reason}. Start it with `streamfill stack "
                              "up` or set STREAMFILL_DB_URL"))


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _print_status(statuses: list[stack.Status]) -> None:
    table = Table(title="streamfill local stack")
    for col in ("service", "address", "pid", "health", "details"):
        table.add_column(col, overflow="fold")
    for s in statuses:
        if s.healthy:
            health = "[green]healthy[/]"
        elif s.running:
            health = f"[yellow]not answering[/] (log: {s.log})"
        else:
            health = f"[red]down[/] (log: {s.log})"
        table.add_row(s.name, s.address, str(s.pid or "-"), health, s.detail)
    console.print(table)


if __name__ == "__main__":
    app()

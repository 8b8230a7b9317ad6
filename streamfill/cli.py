"""The `streamfill` command."""

from __future__ import annotations

import json
import re
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

console = Console()
err = Console(stderr=True)


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
        raise _fail(RuntimeError(f"cannot reach offsets_db at {_safe(url)}: {exc.orig}. Start it with "
                                 "`streamfill stack up` or set STREAMFILL_DB_URL")) from None
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
        raise _fail(RuntimeError(f"cannot reach offsets_db at {_safe(url)}: {exc.orig}. Start it with "
                                 "`streamfill stack up` or set STREAMFILL_DB_URL")) from None
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

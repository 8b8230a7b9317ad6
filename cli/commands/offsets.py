"""`streamfill offsets history | latest | lag`: what a job read and where it stands, from offsets_db's views."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Annotated

import typer
from rich.table import Table

from streamfill import durations
from streamfill.console import console, refusals
from streamfill.settings import get_settings

app = typer.Typer(no_args_is_help=True, help="What a job read and where it stands, from offsets_db.")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


JobOpt = Annotated[str, typer.Option("--job", help="the job name (the source's job option)")]
TopicOpt = Annotated[str | None, typer.Option("--topic", help="only this topic")]
SinceOpt = Annotated[str | None, typer.Option(
    "--since", help="only rows from this time on: ISO-8601 (2026-11-22T10:00:00+00:00) or an age (30m, 2h, 1d)")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table or json")]


@app.command("history")
def history(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None, format: FormatOpt = OutputFormat.table,
            limit: Annotated[int, typer.Option(min=1, help="newest rows shown")] = 1000) -> None:
    """Every planned range of the job, newest batch first (view offset_history)."""
    _show("history", job, topic, since, format, limit)


@app.command("latest")
def latest(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None,
           format: FormatOpt = OutputFormat.table) -> None:
    """Where the job resumes: the next offset per partition (view latest_offsets)."""
    _show("latest", job, topic, since, format, 100_000)


@app.command("lag")
def lag(job: JobOpt, topic: TopicOpt = None, since: SinceOpt = None, format: FormatOpt = OutputFormat.table) -> None:
    """How far behind the log end the job was at its last planning, per partition (view consumer_lag)."""
    _show("lag", job, topic, since, format, 100_000)


def parse_since(raw: str | None, now: datetime | None = None) -> datetime | None:
    """An ISO-8601 instant (UTC when it has no offset) or an age such as 30m, 2h or 1d."""
    if raw is None:
        return None
    now = now or datetime.now(timezone.utc)
    age = durations.split(raw)
    if age:
        return now - timedelta(milliseconds=age[0] * durations.UNITS_MS[age[1]])
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise typer.BadParameter(f"{raw!r} is neither an ISO-8601 time nor an age; use e.g. "
                                 "2026-11-22T10:00:00+00:00 or 2h", param_hint="--since") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _show(view: str, job: str, topic: str | None, since: str | None, fmt: OutputFormat, limit: int) -> None:
    from streamfill.offsets_db import queries
    from streamfill.offsets_db.engine import make_engine, reaching

    when = parse_since(since)
    url = get_settings().offsets_db_url
    engine = make_engine(url)
    try:
        with refusals(), reaching(url):
            found = queries.rows(engine, view, job, topic, when, limit)
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

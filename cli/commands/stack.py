"""`streamfill stack up | down | status`: the local stack."""

from __future__ import annotations

import typer
from rich.table import Table

from streamfill.cli import stack
from streamfill.console import console, refusals, say
from streamfill.settings import get_settings

app = typer.Typer(no_args_is_help=True, help="The local stack: PostgreSQL, Kafka, Airflow, Spark.")


@app.command("up")
def up() -> None:
    """Install what is missing, start every service and wait until each answers a real request."""
    with refusals():
        statuses = stack.up(get_settings(), say=say)
    print_status(statuses)


@app.command("down")
def down() -> None:
    """Stop the services that `stack up` started."""
    stack.down(get_settings(), say=say)


@app.command("status")
def status() -> None:
    """Each service with its address, process id and health (down, or running but not answering); exit code 1
    when one is not healthy. Where the passwords are, never the passwords."""
    statuses = stack.status(get_settings())
    print_status(statuses)
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


def print_status(statuses: list[stack.Status]) -> None:
    table = Table(title="streamfill local stack")
    for col in ("service", "address", "pid", "health", "details"):
        table.add_column(col, overflow="fold")
    for s in statuses:
        if s.healthy:
            health = "[green]healthy[/]"
        elif s.running:
            health = f"[yellow]running, not answering[/] (`stack up` restarts it; log: {s.log})"
        else:
            health = f"[red]down[/] (log: {s.log})"
        table.add_row(s.name, s.address, str(s.pid or "-"), health, s.detail)
    console.print(table)

"""`streamfill stack up | down | status`: the local stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table

from streamfill import extras
from streamfill.console import EXIT_CODES, console, refusals, say
from streamfill.errors import FAILED
from streamfill.settings import get_settings

if TYPE_CHECKING:
    from streamfill.cli.stack import Status

app = typer.Typer(no_args_is_help=True, help="The local stack: PostgreSQL, Kafka, Airflow, Spark.")


@app.command("up")
def up() -> None:
    """Install what is missing, start every service and wait until each answers a real request."""
    with refusals():
        statuses = _stack().up(get_settings(), say=say)
    print_status(statuses)


@app.command("down")
def down() -> None:
    """Stop the services that `stack up` started."""
    with refusals():
        stack = _stack()
    stack.down(get_settings(), say=say)


@app.command("status")
def status() -> None:
    """Each service with its address, process id and health (down, or running but not answering); exit code 1
    when one is not healthy. Where the passwords are, never the passwords."""
    with refusals():
        stack = _stack()
    statuses = stack.status(get_settings())
    print_status(statuses)
    if not all(s.healthy for s in statuses):
        raise typer.Exit(EXIT_CODES[FAILED])


def _stack():
    """The local stack's module, imported by its commands alone: it runs every role (`streamfill[all]`), and the
    CLI's other commands run without them."""
    extras.require(extras.ALL, "the local stack (`streamfill stack`)")
    from streamfill.cli import stack

    return stack


def print_status(statuses: list[Status]) -> None:
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

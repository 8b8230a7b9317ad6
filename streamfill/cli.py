"""The `streamfill` command."""

from __future__ import annotations

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

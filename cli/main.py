"""The `streamfill` command: one small module per command group (cli/commands/), assembled here."""

from __future__ import annotations

import typer

from streamfill.cli.commands import db, demo, jobs, offsets, produce, quality, run, stack
from streamfill.cli.group import Commands

STACK = "stack"  # the local stack's own commands: they use its addresses by definition
# a traceback's local variables may hold a password: Commands prints none, and Typer's own hook shows none either
app = typer.Typer(cls=Commands, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Kafka batch-plus-streaming on PySpark, Airflow and PostgreSQL.")


def print_version(asked: bool) -> None:
    if asked:
        from streamfill.version import installed

        typer.echo(installed())
        raise typer.Exit()


@app.callback()
def check_settings(ctx: typer.Context, version: bool = typer.Option(
        False, "--version", callback=print_version, is_eager=True,
        help="print streamfill's version (that of its installed distribution) and exit")) -> None:
    """Every command reads the STREAMFILL_* settings: a bad one stops it here, named, before anything runs. A
    command given no address of a service says which of the local stack's it takes, or refuses without a local
    stack (streamfill.settings.as_command)."""
    from streamfill.console import refusals, tell
    from streamfill.settings import as_command, get_settings

    with refusals():
        get_settings()
    if ctx.invoked_subcommand != STACK:
        ctx.with_resource(as_command(tell))


app.add_typer(stack.app, name=STACK)
app.add_typer(db.app, name="db")
app.add_typer(offsets.app, name="offsets")
app.add_typer(jobs.app, name="jobs")
app.command("produce")(produce.produce)
app.command("stream")(run.stream)
app.command("backfill")(run.backfill)
app.command("quality")(quality.quality)
app.command("demo")(demo.demo)

if __name__ == "__main__":
    app()

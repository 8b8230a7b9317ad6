"""The `streamfill` command: one small module per command group (cli/commands/), assembled here."""

from __future__ import annotations

import typer

from streamfill.cli.commands import db, demo, jobs, offsets, produce, quality, run, stack

app = typer.Typer(no_args_is_help=True, help="Kafka batch-plus-streaming on PySpark, Airflow and PostgreSQL.")


@app.callback()
def check_settings() -> None:
    """Every command reads the STREAMFILL_* settings: a bad one stops it here, named, before anything runs."""
    from streamfill.console import refusals
    from streamfill.settings import get_settings

    with refusals():
        get_settings()


app.add_typer(stack.app, name="stack")
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

"""`streamfill jobs list | check`: the pipeline entries of the jobs file, and what an entry will create."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from streamfill.spark_jobs.runs import console, fail

app = typer.Typer(no_args_is_help=True, help="The pipeline entries of the jobs file (one per topic).")


@app.command("list")
def list_jobs() -> None:
    """Every entry with its source, format, table and the DAGs it gives."""
    from streamfill.orchestration import dag_ids
    from streamfill.spark_jobs.pipelines import jobs_file, load
    from streamfill.errors import StreamfillError

    try:
        entries = load()
    except StreamfillError as exc:
        raise fail(exc) from None
    table = Table(title=f"pipelines in {jobs_file()} (and jobs.d/)")
    for col in ("job", "source", "format", "table", "key / mode", "DAGs"):
        table.add_column(col, overflow="fold")
    for name, spec in entries.items():
        kind, source = spec.topics_option
        dags = dag_ids.of_entry(name, spec.topic is not None) + [dag_ids.REPLAY] * (spec.topic is not None)
        table.add_row(name, f"{'pattern ' if kind == 'subscribePattern' else ''}{source}", spec.format, spec.table,
                      f"{', '.join(spec.key)} / {spec.mode}", "\n".join(dags))
    console.print(table)


@app.command("check")
def check(file: Annotated[Optional[Path], typer.Argument(
        help="a jobs file to check (default: the jobs file and jobs.d/)")] = None) -> None:
    """Validate a jobs file and print, per job, the table it will create (column, type, rules); touches nothing."""
    from streamfill.spark_jobs.pipelines import load, read, registry
    from streamfill.spark_jobs.pipelines.expectations import extra
    from streamfill.spark_jobs.pipelines.spec import COORDINATES
    from streamfill.errors import StreamfillError

    try:
        entries = read(file) if file else load()
        # an entry naming a registry subject instead of columns: the columns its latest version gives
        entries = {name: registry.resolved(spec) for name, spec in entries.items()}
        for spec in entries.values():
            extra(spec)  # the quality: list, against Great Expectations
    except StreamfillError as exc:
        raise fail(exc) from None
    coordinates = {"topic": "text", "partition": "integer", "offset": "bigint", "kafka_timestamp": "timestamptz"}
    for name, spec in entries.items():
        source = f", columns from subject {spec.registry_subject}" if spec.registry_reader_schema else ""
        table = Table(title=f"job {name}: table {spec.table} ({spec.format}{source}, key {', '.join(spec.key)}, "
                            f"{spec.mode})")
        for col in ("column", "type", "rules"):
            table.add_column(col, overflow="fold")
        for column in COORDINATES:
            table.add_row(column, coordinates[column], "Kafka coordinates")
        if spec.format == "raw":
            for column, pg in (("key", "bytea"), ("value", "bytea"), ("headers", "jsonb")):
                table.add_row(column, pg, "as the record came")
        for column, c in spec.columns.items():
            rules = [*map(str, c.rules()), *(["key"] if column in spec.key else [])]
            source = f" (field {c.field})" if c.field else ""
            table.add_row(column, c.column_type.postgres, escape(", ".join(rules) + source))
        for column, expression in spec.derived.items():
            table.add_row(column, "from Spark SQL", escape(expression))
        console.print(table)
        console.print(f"  starts at: {spec.start} (while offsets_db has no position for the job)", highlight=False)
        if spec.quality:
            console.print("  quality: " + "; ".join(next(iter(q)) for q in spec.quality), highlight=False)
    console.print(f"{len(entries)} job(s) valid", highlight=False)

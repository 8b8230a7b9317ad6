"""`streamfill jobs list | check`: the pipeline entries of the jobs file, and what an entry will create."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from streamfill.connectors.kafka.source_declarations import SUBSCRIBE_PATTERN
from streamfill.console import console, refusals

app = typer.Typer(no_args_is_help=True, help="The pipeline entries of the jobs file (one per topic).")


@app.command("list")
def list_jobs() -> None:
    """Every entry with its source, format, table and the DAGs it gives."""
    from streamfill.orchestration import dag_ids
    from streamfill.spark_jobs.pipelines import jobs_file, load_each

    found = load_each()
    entries = found.specs
    table = Table(title=f"pipelines in {jobs_file()} (and jobs.d/)")
    for col in ("job", "source", "format", "table", "key / mode", "DAGs"):
        table.add_column(col, overflow="fold")
    for name, spec in entries.items():
        kind, source = spec.topics_option
        dags = dag_ids.of_entry(name, spec.windowed) + [dag_ids.REPLAY] * spec.windowed
        tables = "\n".join(dict.fromkeys(t.table for t in spec.route_tables())) or spec.table
        table.add_row(name, f"{'pattern ' if kind == SUBSCRIBE_PATTERN.key else ''}{source}", spec.format, tables,
                      f"{', '.join(spec.key)} / {spec.mode}", "\n".join(dags))
    console.print(table)
    with refusals():
        found.strict()  # a broken entry has no DAGs: each named, exit code 1


@app.command("check")
def check(file: Annotated[Path | None, typer.Argument(
        help="a jobs file to check (default: the jobs file and jobs.d/)")] = None) -> None:
    """Validate a jobs file and print, per job, the table it will create (column, type, rules); touches nothing.
    Entry by entry, as the DAG files read it: the entries that load are shown, then every broken one is named."""
    from streamfill.changes import NO_DELETES, TOMBSTONE
    from streamfill.spark_jobs.pipelines import load_each, read_each, registry
    from streamfill.spark_jobs.pipelines.expectations import extra
    from streamfill.spark_jobs.pipelines.routes import DEAD_LETTERS

    found = read_each(file) if file else load_each()
    with refusals():
        # an entry naming a registry subject instead of columns: the columns its latest version gives
        entries = {name: registry.resolved(spec) for name, spec in found.specs.items()}
        for spec in entries.values():
            extra(spec)  # the quality: list, against Great Expectations
    for name, spec in entries.items():
        source = f", columns from subject {spec.registry_subject}" if spec.registry_reader_schema else ""
        deletes = f", deletes {spec.deletes}" if spec.deletes != NO_DELETES else ""
        if spec.route is None:
            console.print(_table_of(f"job {name}: table {spec.table} ({spec.format}{source}{deletes}, key "
                                    f"{', '.join(spec.key)}, {spec.mode})", spec, spec.columns, spec.derived,
                                    spec.key))
        for t in spec.route_tables():
            picked = f"{spec.route.field} = {t.value}" if t.value is not None else "records no route names"
            console.print(_table_of(f"job {name}: table {t.table} ({spec.format}{source}, {picked}, key "
                                    f"{', '.join(t.key)}, {t.mode})", spec, t.columns, t.derived, t.key))
        if spec.route is not None and spec.route.unmatched == DEAD_LETTERS:
            console.print(f"  records no route names: dead letters (no route for {spec.route.field}: ...)",
                          highlight=False)
        tombstone = "deletes the row its Kafka key names" if spec.deletes == TOMBSTONE else "is ignored"
        if spec.format == "debezium":
            console.print(f"  changes: op c, r and u upsert after, op d deletes before's key, a tombstone {tombstone}",
                          highlight=False)
        elif spec.deletes == TOMBSTONE:
            console.print(f"  deletes: a tombstone (null value) {tombstone}", highlight=False)
        console.print(f"  starts at: {spec.start} (while offsets_db has no position for the job)", highlight=False)
        if spec.quality:
            console.print("  quality: " + "; ".join(next(iter(q)) for q in spec.quality), highlight=False)
    console.print(f"{len(entries)} job(s) valid" + (f", {len(found.broken)} broken" if found.broken else ""),
                  highlight=False)
    with refusals():
        found.strict()  # each broken entry named, with its file, field, value and fix; exit code 1


def _table_of(title: str, spec, columns, derived, key) -> Table:
    """One table an entry creates: its columns with their PostgreSQL types and rules."""
    from streamfill.changes import SOURCE_POSITION, SOURCE_POSITION_TYPE
    from streamfill.spark_jobs.pipelines.columns import COORDINATE_TYPES, COORDINATES
    from streamfill.spark_jobs.pipelines.types import parse_type

    table = Table(title=title)
    for col in ("column", "type", "rules"):
        table.add_column(col, overflow="fold")
    for column in COORDINATES:
        table.add_row(column, parse_type(COORDINATE_TYPES[column]).postgres, "Kafka coordinates")
    if spec.format == "debezium":
        from streamfill.spark_jobs.pipelines.debezium import default_positions

        where = "none (position: none)" if spec.position_path is None else \
            f"the change event's {spec.position}" if spec.position else f"by its connector: {default_positions()}"
        table.add_row(SOURCE_POSITION, parse_type(SOURCE_POSITION_TYPE).postgres, escape(f"position: {where}"))
    if spec.format == "raw":
        for column, pg in (("key", "bytea"), ("value", "bytea"), ("headers", "jsonb")):
            table.add_row(column, pg, "as the record came")
    for column, c in columns.items():
        rules = [*map(str, c.rules()), *(["key"] if column in key else [])]
        source = f" (field {c.field})" if c.field else ""
        table.add_row(column, c.column_type.postgres, escape(", ".join(rules) + source))
    for column, expression in derived.items():
        table.add_row(column, "from Spark SQL", escape(expression))
    return table

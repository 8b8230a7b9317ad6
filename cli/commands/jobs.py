"""`streamfill jobs list | check | from-connect`: the pipeline entries of the jobs file, what an entry will create,
and the entries that stand in for a Kafka Connect JDBC sink."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from streamfill.connectors.kafka.source_declarations import SUBSCRIBE_PATTERN
from streamfill.console import console, err, refusals

app = typer.Typer(no_args_is_help=True, help="The pipeline entries of the jobs file (one per topic).")


@app.command("list")
def list_jobs() -> None:
    """Every entry with its source, format, table and the DAGs it gives."""
    from streamfill import dag_ids
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
        found.strict()  # a broken entry has no DAGs: each named, exit code 2 (bad input)


@app.command("check")
def check(file: Annotated[Path | None, typer.Argument(
        help="a jobs file to check (default: the jobs file and jobs.d/)")] = None) -> None:
    """Validate a jobs file and print, per job, the table it will create (column, type, rules); touches nothing.
    Entry by entry, as the DAG files read it: the entries that load are shown, then every broken one is named."""
    from streamfill import extras
    from streamfill.changes import NO_DELETES, TOMBSTONE
    from streamfill.spark_jobs.pipelines import load_each, read_each, registry
    from streamfill.spark_jobs.pipelines.expectations import extra
    from streamfill.spark_jobs.pipelines.routes import DEAD_LETTERS

    found = read_each(file) if file else load_each()
    # the quality: lists are checked by building them with Great Expectations, which the core install lacks
    gx = not extras.missing(extras.MODULES[extras.QUALITY])
    with refusals():
        # an entry naming a registry subject instead of columns: the columns its latest version gives
        entries = {name: registry.resolved(spec) for name, spec in found.specs.items()}
        for spec in entries.values():
            if gx:
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
        console.print(f"  starts at: {_start(spec.start)} (while offsets_db has no position for the job)",
                      highlight=False)
        if spec.quality:
            console.print("  quality: " + "; ".join(next(iter(q)) for q in spec.quality), highlight=False)
    console.print(f"{len(entries)} job(s) valid" + (f", {len(found.broken)} broken" if found.broken else ""),
                  highlight=False)
    if not gx and any(spec.quality for spec in entries.values()):
        console.print(escape("quality: lists not checked: Great Expectations is not installed here (pip install "
                             f"'streamfill[{extras.QUALITY}]' checks them)"), highlight=False)
    with refusals():
        found.strict()  # each broken entry named, with its file, field, value and fix; exit code 2 (bad input)


def _start(start: str) -> str:
    from streamfill.connectors.kafka.offsets import GroupOffsets, parse_start

    spec = parse_start(start, "start")
    if isinstance(spec, GroupOffsets):
        return f"consumer group {spec.group}'s committed offsets, earliest where it has none"
    return start


@app.command("from-connect")
def from_connect(
        connector: Annotated[Path, typer.Argument(
            metavar="CONNECTOR", help="the connector's configuration: JSON as POST /connectors or PUT "
                                      "/connectors/NAME/config takes it, or a .properties file")],
        output: Annotated[Path | None, typer.Option(
            "--output", "-o", help="write the entries to this file (a jobs.d/ file, say); default: stdout")] = None,
        columns_from_table: Annotated[bool, typer.Option(
            "--columns-from-table", help="the columns, their types and the key from the table the connector "
                                         "writes, read in --database-url")] = False,
        columns_from_registry: Annotated[bool, typer.Option(
            "--columns-from-registry", help="the columns of the value subject's latest schema, written out (Avro "
                                            "values through a schema registry)")] = False,
        database_url: Annotated[str | None, typer.Option(
            "--database-url", help="the database --columns-from-table reads, and that an entry writes without "
                                   "postgres_conn_id (default: offsets_db's, STREAMFILL_DB_URL)")] = None,
        job: Annotated[str | None, typer.Option("--job", help="the job's name (default: the connector's)")] = None,
        name: Annotated[str | None, typer.Option(
            "--name", help="the connector's name, for a flat configuration without one")] = None,
        postgres_conn_id: Annotated[str | None, typer.Option(
            "--postgres-conn-id", help="the Airflow connection of the database the connector writes, when it is not "
                                       "streamfill's (default: postgres_<its database>)")] = None) -> None:
    """Write the entries that stand in for a Kafka Connect JDBC sink (Confluent's or Debezium's), starting where the
    connector's consumer group stands; or refuse, naming every setting streamfill cannot carry. What differs from
    the connector is written as comments above the entries; docs/from-connect.md has the switch step by step."""
    from dataclasses import replace

    from sqlalchemy import make_url

    from streamfill.errors import OptionError
    from streamfill.settings import get_settings
    from streamfill.spark_jobs.pipelines import connect_columns, connect_config, connect_forms

    with refusals():
        if columns_from_table and columns_from_registry:
            raise OptionError("--columns-from-table", True, "is given with --columns-from-registry",
                              "give one source of columns")
        try:
            text = connector.read_text()
        except OSError as exc:
            raise OptionError(connect_forms.ARGUMENT, str(connector), f"cannot be read ({exc.strerror})",
                              "give the path of the connector's configuration") from None
        url = database_url or get_settings().offsets_db_url
        ours = make_url(url)
        source = "table" if columns_from_table else "registry" if columns_from_registry else None
        choices = connect_config.Choices(job=job, name=name, columns=source, postgres_conn_id=postgres_conn_id,
                                         database=(ours.host or "localhost", ours.port or 5432, ours.database or ""))
        found = connect_config.translate(connect_forms.read(text, str(connector)), choices,
                                         lambda table: connect_columns.read_table(url, table))
        if columns_from_registry:
            found = replace(found, entries=tuple(
                replace(e, body=connect_columns.with_registry_columns(dict(e.body), e.job), keys_only=False)
                for e in found.entries))
    if output is None:
        print(found.yaml(), end="")
        return
    output.write_text(found.yaml())
    err.print(f"wrote {len(found.entries)} entr{'y' if len(found.entries) == 1 else 'ies'} to {output}, each "
              f"starting at consumer group {found.group}'s offsets; what differs from the connector:", highlight=False)
    for note in found.notes:
        err.print(f"- {note}", highlight=False, markup=False)
    err.print(f"check it: streamfill jobs check {output}", highlight=False)


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

"""What the stream and the backfill share around Spark: their command lines, the session, the `runs` row in
offsets_db, the sink's options, and how a failure is reported (one line naming the cause, exit code 1)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from sqlalchemy import make_url

from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.offsets_db.fencing import Lease
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs import pipelines
from streamfill.spark_jobs.pipelines import PipelineSpec, registry
from streamfill import durations
from streamfill.errors import OptionError
from streamfill.kafka_client import describe
from streamfill.partitions import Positions, to_json_shape
from streamfill.console import console, err, fail, say  # noqa: F401  (moving to their users)
from streamfill.settings import Settings, get_settings


A = TypeVar("A")


def entry_of(job: str, pipeline: str | None) -> PipelineSpec:
    """The jobs file's entry a launch runs: the one --pipeline names, else the one named like --job."""
    return pipelines.entry(pipeline or job, "--pipeline" if pipeline else "--job")


class NamesAnEntry:
    """The arguments of a launch that runs a jobs file's entry: `pipeline`, else the one named like `job`."""

    @cached_property
    def entry(self) -> PipelineSpec:
        """The entry, read from the jobs file once per argument set."""
        return entry_of(self.job, self.pipeline)

    @cached_property
    def spec(self) -> PipelineSpec:
        """The entry as the launch runs it: an entry that names a registry subject instead of columns gets the
        columns of the subject's latest version, looked up once, here."""
        return registry.resolved(self.entry)


def flag(name: str) -> str:
    """A field's command-line flag: `max_offsets_per_trigger` is `--max-offsets-per-trigger`, `from_` (`from` is a
    Python keyword) is `--from`."""
    return "--" + name.rstrip("_").replace("_", "-")


def parse_argv(cls: type[A], argv: Sequence[str], prog: str, extra: Sequence[str] = ("master",)) -> tuple[A, dict]:
    """A job's arguments from a spark-submit command line, one flag per dataclass field (the same flags as the
    `streamfill` command). Returns the arguments and the values of `extra` flags (e.g. --master)."""
    parser = argparse.ArgumentParser(prog=prog)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        parser.add_argument(flag(name), dest=name, required=required and name not in getattr(cls, "DERIVED", ()))
    for name in extra:
        parser.add_argument(flag(name), dest=name)
    ns = vars(parser.parse_args(list(argv)))
    given = {k: _typed(fields[k], v) for k, v in ns.items() if k in fields and v is not None}
    return cls.from_flags(**given), {k: ns[k] for k in extra}


def argv(cls: type, **values: object) -> list[str]:
    """The command line `parse_argv` reads back into `cls`: each value under its field's flag, in the order given
    (None left out), for a task that launches the job with spark-submit. A name that is no field is refused."""
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    return [part for name, value in values.items() if value is not None for part in (flag(name), str(value))]


def submit_main(cls: type[A], launch: Callable[[A, str | None], object], argv: Sequence[str], prog: str) -> int:
    """A job's spark-submit entry: its flags into its argument model (refused with the flag, the value and the
    fix), then its launch on the --master given (or the settings')."""
    from streamfill.errors import StreamfillError

    try:
        args, extra = parse_argv(cls, argv, prog)
    except StreamfillError as exc:
        raise fail(exc) from None
    launch(args, extra["master"])
    return 0


def _typed(f: dataclasses.Field, value: str):
    kind = str(f.type)
    return int(value) if "int" in kind and value.lstrip("-").isdigit() else value


def job_session(app_name: str, master: str | None = None, settings: Settings | None = None):
    from streamfill.spark_jobs.session import spark_session

    settings = settings or get_settings()
    if master:
        settings = settings.model_copy(update={"spark_master": master})
    return spark_session(app_name, settings, {"spark.ui.showConsoleProgress": "false"})


def sink_options(spec: PipelineSpec, job: str, table: str, mode: str, url: str, generation: int | None = None,
                 ends: Positions | None = None) -> dict[str, str]:
    """Valid rows to `table` with the entry's column types and key (columns it adds are added to the table),
    dead letters to offsets_db.dead_letters, offsets committed in the same transaction by the launch holding
    the job (`generation`), as the batch ending at `ends` (a backfill's chunk) when given. A routed entry writes
    each of its tables with their own columns, key and mode; an entry that deletes has its deletes applied."""
    types = {name: c.column_type.postgres for name, c in spec.columns.items()}
    options = {"table": table, "job": job, "mode": mode, "deadLetters": str(spec.dead_letters).lower(), "url": url,
               "keyColumns": ",".join(spec.key), "columnTypes": json.dumps(types), "evolveSchema": "true"}
    if spec.can_delete:
        if mode != REPLACE:
            raise OptionError("--mode", mode, f"cannot write entry {spec.name!r}: its records delete keys "
                              "(deletes: tombstone, or a change-data-capture format), which only mode replace "
                              "applies", "Use --mode replace")
        options["deletes"] = "true"
    routes = spec.route_tables()
    if routes:
        if table != spec.table or mode != spec.mode:
            given = ("--table", table) if table != spec.table else ("--mode", mode)
            raise OptionError(*given, f"cannot apply to entry {spec.name!r}: it routes its records by "
                              f"{spec.route.field} to the tables {', '.join(r.table for r in routes)}, each with "
                              "its own mode", "Run the entry as it is, into its tables; or declare another entry")
        for own in ("keyColumns", "columnTypes", "mode"):  # each table's, in routes
            options.pop(own)
        options["routes"] = json.dumps({r.table: {
            "columns": r.table_columns(), "key": list(r.key), "mode": r.mode,
            "columnTypes": {name: c.column_type.postgres for name, c in r.columns.items()}} for r in routes})
    if generation is not None:
        options["jobGeneration"] = str(generation)
    if ends is not None:
        options["endingOffsets"] = json.dumps(to_json_shape(ends))
    return options


def say_where(spark, settings: Settings) -> None:
    """The launch's first lines: the cluster it reads (no secret) and its Spark UI."""
    console.print(f"Kafka: {describe(settings.kafka_client())}", highlight=False)
    if spark.sparkContext.uiWebUrl:
        console.print(f"Spark UI: {spark.sparkContext.uiWebUrl}", highlight=False)


def kafka_options(kafka: Mapping[str, str]) -> dict[str, str]:
    """The cluster's client settings as the data sources' `kafka.*` options. A plan's text shows their values
    except those spark.redaction.regex and the session's spark.sql.redaction.options.regex name."""
    return {f"kafka.{key}": value for key, value in kafka.items()}


def reader_options(spec: PipelineSpec) -> dict[str, str]:
    """The read's options that have it type the entry's values where it can (compile.reader_options)."""
    from streamfill.spark_jobs.pipelines.compile import reader_options as options

    return options(spec)


def rows_of(spec: PipelineSpec, kafka):
    """The entry's parse; without dead letters, invalid records are left out of the table (and counted nowhere)."""
    from pyspark.sql import functions as F

    from streamfill.spark_jobs.pipelines.compile import parse

    rows = parse(kafka, spec)
    return rows if spec.dead_letters else rows.where(F.col("_error").isNull()).drop("_error", "_raw")


@dataclass
class RunRow:
    id: int
    status: str = "succeeded"  # the body sets "stopped" when it ended on request
    lineage: object | None = None  # the launch's OpenLineage run (spark_jobs.lineage.LineageRun)


@dataclass(frozen=True)
class LineageIO:
    """What a launch reads and writes, for its OpenLineage events (streamfill.datasets names or built datasets)."""

    inputs: tuple = ()
    outputs: tuple = ()
    processing: str = "BATCH"  # or STREAMING


def lineage_io(spec: PipelineSpec, topics: list[str], kafka: Mapping[str, str], url: str, table: str,
               processing: str = "BATCH") -> LineageIO:
    """The topics an entry's launch reads (a pattern stands for the topics it matches) and the table it writes
    with the columns the entry gives it."""
    from streamfill.spark_jobs.lineage_events import output_dataset, schema_facet
    from streamfill.datasets import KafkaTopic, PgTable

    servers = kafka.get("bootstrap.servers", "")
    return LineageIO(tuple(KafkaTopic.of(servers, t) for t in topics),
                     (output_dataset(PgTable.of(url, table), schema=schema_facet(spec)),), processing)


@contextmanager
def recorded_run(store: OffsetStore, job: str, spark_app_id: str | None = None,
                 lease: Lease | None = None, io: LineageIO = LineageIO()) -> Iterator[RunRow]:
    """A `runs` row for this launch (which holds the job: `lease`), with Airflow's dag and run ids when Airflow
    launched it (it exports AIRFLOW_CTX_* to the tasks it runs). Ends as succeeded, stopped (on request or
    Ctrl-C) or failed. Its OpenLineage run (when lineage is configured: spark_jobs/lineage.py) starts and ends
    with it, under the parent run OPENLINEAGE_PARENT_ID names; launches found lost end as ABORT."""
    from streamfill.spark_jobs import lineage
    from streamfill.spark_jobs.lineage_events import Parent

    parent = Parent.parse(os.environ)
    lineage_id, lost = lineage.new_run_id(), []
    run = RunRow(store.start_run(job, dag_id=os.environ.get("AIRFLOW_CTX_DAG_ID"),
                                 airflow_run_id=os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"), spark_app_id=spark_app_id,
                                 lease=lease, lineage_run_id=lineage_id, on_lost=lost.extend))
    for old in lost:
        lineage.aborted(job, old, io.inputs, io.outputs, processing=io.processing,
                        reason="the launch ended without saying so (killed or its machine lost); found by the next")
    try:
        with lineage.launch_run(job, io.inputs, io.outputs, parent=parent, run_id=lineage_id,
                                processing=io.processing) as run.lineage:
            yield run
    except KeyboardInterrupt:
        run.status = "stopped"
        raise
    except BaseException:
        run.status = "failed"
        raise
    finally:
        store.end_run(run.id, run.status)


def wait_seconds(raw: str) -> float:
    """--wait-for-job: 0 refuses at once when another launch holds the job; 30s, 10m, 1h wait that long."""
    ms = durations.parse_ms(str(raw), default_unit="s")
    if ms is None:
        raise OptionError("--wait-for-job", raw, "is not a duration", "use 0 (refuse at once), 30s, 10m or 1h")
    return ms / 1000





def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def unreachable(url: str, exc: BaseException) -> SystemExit:
    reason = " ".join(str(getattr(exc, "orig", exc)).split())
    return fail(RuntimeError(f"cannot reach offsets_db at {safe_url(url)}: {reason}. Start it with `streamfill stack "
                             "up` or set STREAMFILL_DB_URL"))

"""The driver's plan of a `streamfill_postgres` write, decided once before any task runs: its options, the tables
it writes (each created, checked or evolved) and their stages, and how tasks connect."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql.types import StructType

from streamfill.changes import DELETE_COLUMN, SOURCE_POSITION
from streamfill.connectors.postgres import (
    connection,
    pool,
    recorded_deletes,
    sink_options,
    stage,
    target,
    target_setup,
    versions,
)
from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.sink_options import KAFKA_COORDINATES, REPLACE, SinkOptions
from streamfill.connectors.postgres.stage import Stage
from streamfill.connectors.postgres.target import Column, Target
from streamfill.connectors.spark import worker_gc
from streamfill.connectors.spark.pg_types import pg_type
from streamfill.errors import SinkError
from streamfill.urls import without_password


@dataclass(frozen=True)
class Lane:
    """One table a write commits into, with its stage; `route` is the _route value of its rows (None: all)."""

    route: str | None
    target: Target
    stage: Stage
    mode: str
    version: tuple[str, ...]


@dataclass(frozen=True)
class SinkPlan:
    """Everything a task and the commit need, decided once on the driver."""

    url: str
    options: SinkOptions
    lanes: tuple[Lane, ...]  # one per table, the first holding the dead letters' stage
    own_stage: bool  # a stage of this write alone (a df.write, or no job): dropped after its commit
    ranged: bool = False  # rows carry topic, partition and offset: commit messages name their offsets
    # the database keeps deleted keys and the write has no deletes: its commit checks again that none is recorded
    guarded: bool = False
    # libpq's form of url and the connection's keywords, derived where the plan is made (the driver) and
    # pickled to the tasks, which then need neither SQLAlchemy nor the settings to connect
    conninfo: str = field(init=False)
    connect_kw: tuple[tuple[str, object], ...] = field(init=False)

    def __post_init__(self) -> None:
        from streamfill.pg import connect_args

        object.__setattr__(self, "conninfo", connection.dsn(self.url))
        object.__setattr__(self, "connect_kw", tuple(connect_args().items()))

    def connect(self):
        """A connection this worker kept from an earlier call, or a new one; give it back with pool.release."""
        return pool.connect(self.conninfo, **dict(self.connect_kw))

    @property
    def target(self) -> Target:
        """The write's table (a routed write's first)."""
        return self.lanes[0].target

    @property
    def stage(self) -> Stage:
        """The stage of the write's table, which holds the dead letters of every table it writes."""
        return self.lanes[0].stage


def prepare_table(options: dict, schema: StructType, change: bool = True) -> None:
    """Create, check or evolve the target now, on the driver, before a query reads anything: what the sink
    does when Spark first asks it for a writer (its staging table is made then). With `change` False, only
    check it: what a launch does before it holds its job."""
    plan_write(options, schema, False, streaming=False, stage_it=False, change=change)


def plan_write(options: dict, schema: StructType, overwrite: bool, *, streaming: bool, stage_it: bool = True,
               change: bool = True) -> SinkPlan:
    """The plan of a write of `schema` with these options: its tables prepared and, with `stage_it`, their
    stages made."""
    worker_gc.freeze_after_imports()
    if overwrite:
        raise SinkError("streamfill_postgres does not truncate tables (SaveMode overwrite); use .mode('append') "
                        "with option mode=replace to upsert rows by key")
    opts = sink_options.parse(options, schema.fieldNames(), streaming=streaming, writing=stage_it)
    from streamfill.pg import PgSettings
    from streamfill.settings import default_db_url

    url = opts.url or default_db_url()
    own_stage = opts.job is None or not streaming
    owner = f"{opts.job or 'write'}-{uuid.uuid4().hex}" if own_stage else opts.job
    conn = connection.connect(url)
    guarded = False
    try:
        if opts.job is not None or opts.deletes:  # a delete is recorded in offsets_db's deleted_keys
            _require_offsets_db(conn, url)
        if opts.job is not None:
            _require_grants(conn, opts)
        lanes: list[Lane] = []
        extra = ((DELETE_COLUMN, "boolean"),) if opts.deletes else ()
        for route in opts.tables:
            if not opts.deletes:  # before the table or a stage is made: a refused write changes nothing
                with conn.cursor() as cur:
                    guarded = recorded_deletes.check_plan(
                        cur, f"{target.schema_or_current(cur, route.schema)}.{route.table}")
            columns = [Column(f.name, route.column_types.get(f.name) or pg_type(f.name, f.dataType),
                              pg_type(f.name, f.dataType)) for f in schema.fields
                       if f.name not in opts.staged_only and (not route.columns or f.name in route.columns)]
            target_table = target_setup.prepare(conn, route.schema, route.table, columns, route.key, opts.evolve,
                                                change)
            stage_table = stage.stage_for(target_table, owner, opts.dead_letters, extra,
                                          shared_dead=lanes[0].stage if lanes else None)
            if stage_it:
                stage.create(conn, stage_table, target_table, stage.WRITE if own_stage else stage.STREAM,
                             PgSettings().stage_orphan_after_s, opts.job, opts.generation)
            _check_version(target_table, route.version)
            if any((lane.target.schema, lane.target.table) == (target_table.schema, target_table.table)
                   for lane in lanes):
                raise SinkError(f"routes name table {target_table.schema}.{target_table.table} twice ({route.name} "
                                "among them): give each table once")
            lanes.append(Lane(route.name if opts.routes else None, target_table, stage_table, route.mode,
                              route.version))
    finally:
        pool.release(conn)
    ranged = opts.job is not None and {"topic", "partition", "offset"} <= set(schema.fieldNames())
    return SinkPlan(url, opts, tuple(lanes), own_stage=own_stage, ranged=ranged, guarded=guarded)


def _check_version(target_table: Target, version: Sequence[str]) -> None:
    """A version column (a source position, versionColumn) holds numbers, dates or times: what orders versions."""
    if len(version) <= len(KAFKA_COORDINATES) + 1:
        return
    column = version[0]
    kind = next((c.pg_type for c in target_table.columns if c.name == column), "")
    whole = column != SOURCE_POSITION or normal_type(kind) in ("smallint", "integer", "bigint") or \
        normal_type(kind).startswith("numeric")
    if not (versions.orderable(kind) and whole):
        what = ("a change event's position in its source's log, so it must hold whole numbers"
                if column == SOURCE_POSITION else "so it must hold numbers, dates or times")
        raise SinkError(f"{target_table.schema}.{target_table.table}: column {column} orders the versions of a key "
                        f"({what}), not {normal_type(kind)}. Write it as such a type, or name another column")


def _require_grants(conn, opts) -> None:
    """offsets_db is at this code's migration revision, and a job's role may write it and its table
    (docs/infrastructure.md): either failing fails the launch here, before anything is recorded, naming the fix."""
    from streamfill.offsets_db import grants, revision

    with conn.cursor() as cur:
        revision.check(cur)
        grants.check_job_role(cur)
        for route in opts.tables:
            if route.schema is not None:
                target.check_schema(cur, route.schema, route.table)
            schema = target.schema_or_current(cur, route.schema)
            exists = bool(target.existing_columns(cur, schema, route.table))
            needed = ("SELECT", "INSERT", "UPDATE") if route.mode == REPLACE else ("SELECT", "INSERT")
            grants.check_target(cur, schema, route.table, exists, (*needed, "DELETE") if opts.deletes else needed)


def _require_offsets_db(conn, url: str) -> None:
    from streamfill.offsets_db import batch_commit

    if not batch_commit.installed(conn):
        raise SinkError(f"the database at {without_password(url)} has no offsets_db tables, and a job's offsets "
                        "commit in the same transaction as its rows. Run `streamfill db upgrade` with "
                        "STREAMFILL_DB_URL pointing there")

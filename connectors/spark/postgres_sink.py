"""`streamfill_postgres`: the exactly-once Postgres sink for df.write and writeStream.

Tasks COPY their rows into a staging table under a write id of their own and return it with how many rows
(and dead letters) they staged and, per partition, the lowest and highest offset among them. The driver's
commit hands the protocol (`offsets_db.exactly_once.commit_batch`) the rows to move: exactly the staged rows
named by the commit messages, checked to be the batch's (their offsets) and all there (their count: the stage
is UNLOGGED, and a PostgreSQL crash empties it). The protocol runs the one transaction that also commits the
batch's offsets and resume snapshot, for the launch that holds the job only (`jobGeneration`); a batch already
committed (a replay) moves nothing. Rows of failed task attempts are never named, so they never land. After the
commit a stream's stage is emptied and a single write's stage (a backfill chunk) is dropped.

The target is the user's table: rows reach it by INSERT inside that transaction (`connectors.postgres.move`).
One role per module: the options (`connectors/postgres/sink_options.py`), the table (`target.py`), the stage
(`stage.py`), the move (`move.py`), Spark's types (`pg_types.py`); here, the data source and a write's steps.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from streamfill.connectors.postgres import copy, kept, move, sink_options, stage, target
from streamfill.connectors.postgres.sink_options import REPLACE, SinkOptions
from streamfill.connectors.postgres.stage import Stage
from streamfill.connectors.postgres.target import Column, Target
from streamfill.connectors.spark import worker_gc
from streamfill.connectors.spark.pg_types import pg_type
from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION
from streamfill import failpoints
from streamfill.errors import SinkError
from streamfill.partitions import TopicPartition

if TYPE_CHECKING:  # the driver's and the commit's side (SQLAlchemy, offsets_db) is imported where it runs, so a
    # task's cold Python worker loads only what a task uses: psycopg2, pyarrow, pgpq
    from streamfill.offsets_db.exactly_once import StagedDeadLetters

log = logging.getLogger("streamfill.postgres_sink")

DEAD_LETTERS_IN_MEMORY = 16 * 2**20  # a task's dead letters wait in memory until its rows are in, up to this


def dsn(url: str) -> str:
    """libpq's form of a SQLAlchemy URL."""
    from sqlalchemy import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class StagedWrite(WriterCommitMessage):
    write_id: str
    rows: int  # every row the task attempt staged
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # per partition: lowest, highest
    dead: int = 0  # of them, dead letters (a non-null _error)
    routed: dict[str, int] = field(default_factory=dict)  # a routed write's valid rows per table (its route)
    deletes: int = 0  # of the valid rows, deletes (a true _delete)

    def valid_in(self, lane: Lane) -> int:
        return self.routed.get(lane.route, 0) if lane.route is not None else self.rows - self.dead


class PostgresSink(DataSource):
    """.format("streamfill_postgres").option("table", ...) with job, mode, keyColumns and url."""

    @classmethod
    def name(cls) -> str:
        return "streamfill_postgres"

    def writer(self, schema: StructType, overwrite: bool) -> PostgresBatchWriter:
        return PostgresBatchWriter(_plan(self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> PostgresStreamWriter:
        return PostgresStreamWriter(_plan(self.options, schema, overwrite, streaming=True))


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
    # libpq's form of url and the connection's keywords, derived where the plan is made (the driver) and
    # pickled to the tasks, which then need neither SQLAlchemy nor the settings to connect
    conninfo: str = field(init=False)
    connect_kw: tuple[tuple[str, object], ...] = field(init=False)

    def __post_init__(self) -> None:
        from streamfill.pg import connect_args

        object.__setattr__(self, "conninfo", dsn(self.url))
        object.__setattr__(self, "connect_kw", tuple(connect_args().items()))

    def connect(self):
        """A connection this worker kept from an earlier call, or a new one; give it back with kept.release."""
        return kept.connect(self.conninfo, **dict(self.connect_kw))

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
    _plan(options, schema, False, streaming=False, stage_it=False, change=change)


def _plan(options: dict, schema: StructType, overwrite: bool, *, streaming: bool, stage_it: bool = True,
          change: bool = True) -> SinkPlan:
    worker_gc.settle()
    if overwrite:
        raise SinkError("streamfill_postgres does not truncate tables (SaveMode overwrite); use .mode('append') "
                        "with option mode=replace to upsert rows by key")
    opts = sink_options.parse(options, schema.fieldNames(), streaming=streaming, writing=stage_it)
    from sqlalchemy import make_url

    from streamfill.pg import PgSettings, connect_args
    from streamfill.settings import default_db_url

    url = opts.url or default_db_url()
    own_stage = opts.job is None or not streaming
    owner = f"{opts.job or 'write'}-{uuid.uuid4().hex}" if own_stage else opts.job
    try:
        conn = kept.connect(dsn(url), **connect_args())
    except psycopg2.OperationalError as exc:
        raise SinkError(f"cannot connect to PostgreSQL at {make_url(url).render_as_string()}: "
                        f"{str(exc).strip()}. Start it (streamfill stack up) or fix the url option / "
                        "STREAMFILL_DB_URL") from None
    try:
        if opts.job is not None or opts.deletes:  # a delete is recorded in offsets_db's deleted_keys
            _require_offsets_db(conn, url)
        if opts.job is not None:
            _require_grants(conn, opts)
        lanes: list[Lane] = []
        extra = ((DELETE_COLUMN, "boolean"),) if opts.deletes else ()
        for route in opts.tables:
            columns = [Column(f.name, route.column_types.get(f.name) or pg_type(f.name, f.dataType),
                              pg_type(f.name, f.dataType)) for f in schema.fields
                       if f.name not in opts.staged_only and (not route.columns or f.name in route.columns)]
            target_table = target.prepare(conn, route.schema, route.table, columns, route.key, opts.evolve, change)
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
        kept.release(conn)
    ranged = opts.job is not None and {"topic", "partition", "offset"} <= set(schema.fieldNames())
    return SinkPlan(url, opts, tuple(lanes), own_stage=own_stage, ranged=ranged)


def _check_version(target_table: Target, version: Sequence[str]) -> None:
    """A source position that orders versions is a whole number (a change event's position in its log)."""
    types = {c.name: target.normal_type(c.pg_type) for c in target_table.columns}
    kind = types.get(SOURCE_POSITION, "") if SOURCE_POSITION in version else "numeric"
    if not (kind.startswith("numeric") or kind in ("smallint", "integer", "bigint")):
        raise SinkError(f"{target_table.schema}.{target_table.table}: column {SOURCE_POSITION} orders the versions "
                        f"of a key (a change event's position in its source's log) and must hold whole numbers, not "
                        f"{kind}. Write it as a decimal(38,0) or a long, or name the column otherwise")


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
    from sqlalchemy import make_url

    from streamfill.offsets_db import exactly_once

    if not exactly_once.installed(conn):
        raise SinkError(f"the database at {make_url(url).render_as_string()} has no offsets_db tables, and a "
                        "job's offsets commit in the same transaction as its rows. Run `streamfill db "
                        "upgrade` with STREAMFILL_DB_URL pointing there")


def _stage(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> StagedWrite:
    """One task attempt under a fresh write id: its valid rows into the stage by one binary COPY, its dead
    letters (few) into the stage's dead-letter table after them."""
    worker_gc.settle()
    write_id = uuid.uuid4().hex
    seen = {"rows": 0, "dead": 0, "deletes": 0}
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    dead: list[pa.RecordBatch] = []
    stage_table = plan.stage

    def valid() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not batch.num_rows:
                continue
            seen["rows"] += batch.num_rows
            if plan.ranged:
                _widen(offsets, batch)
            bad = pc.is_valid(batch.column("_error")) if stage_table.dead_letters else None
            if bad is not None and pc.any(bad).as_py():
                letters = batch.filter(bad)
                seen["dead"] += letters.num_rows
                dead.append(letters)
                batch = batch.filter(pc.invert(bad))
            if plan.options.deletes:
                seen["deletes"] += pc.sum(pc.fill_null(batch.column(DELETE_COLUMN), False)).as_py() or 0
            yield batch

    routed: dict[str, int] = {}
    conn = plan.connect()
    spill = None  # a second connection, for dead letters that would not fit in memory until the rows are in
    try:
        def valid_spilling() -> Iterator[pa.RecordBatch]:
            nonlocal spill
            for batch in valid():
                yield batch
                if sum(d.nbytes for d in dead) > DEAD_LETTERS_IN_MEMORY:
                    spill = spill or plan.connect()
                    with spill.cursor() as cur:
                        _copy(cur, stage_table.dead_ident, stage_table.dead_names, iter(dead), write_id)
                    dead.clear()

        with conn.cursor() as cur:
            if not plan.options.routes:
                _copy(cur, stage_table.ident, stage_table.names, valid_spilling(), write_id)
            else:
                routed = _copy_routed(plan, valid_spilling(), write_id)
            _copy(cur, stage_table.dead_ident, stage_table.dead_names, iter(dead), write_id)
        if spill is not None:
            spill.commit()
        conn.commit()
    finally:
        kept.release(conn)
        if spill is not None:
            kept.release(spill)
    return StagedWrite(write_id, seen["rows"], offsets, seen["dead"], routed, seen["deletes"])


def _copy_routed(plan: SinkPlan, batches: Iterator[pa.RecordBatch], write_id: str) -> dict[str, int]:
    """A routed write's valid rows, each into the stage of the table its _route names: one COPY per table, each
    on a connection and thread of its own fed as the batches come, so no table's rows wait in memory. Returns
    the rows staged per table. When any part fails, no table's part is committed and the task fails."""
    import queue
    import threading

    feeds = {lane.route: queue.Queue(maxsize=4) for lane in plan.lanes}
    counts = {lane.route: 0 for lane in plan.lanes}
    failures: list[BaseException] = []
    conns: list = []
    try:
        for _ in plan.lanes:
            conns.append(plan.connect())
    except BaseException:
        for conn in conns:
            kept.release(conn)
        raise

    def copy_lane(lane: Lane, conn) -> None:
        feed, ended = feeds[lane.route], threading.Event()

        def fed() -> Iterator[pa.RecordBatch]:
            while (batch := feed.get()) is not None:
                yield batch
            ended.set()

        try:
            with conn.cursor() as cur:
                _copy(cur, lane.stage.ident, lane.stage.names, fed(), write_id)
            if failures:
                conn.rollback()
            else:
                conn.commit()
        except BaseException as exc:  # noqa: BLE001 - handed to the task's thread, which raises it
            failures.append(exc)
            if not ended.is_set():  # the task's thread may still be feeding this table
                for _ in fed():
                    pass
            try:
                conn.rollback()
            except psycopg2.Error:
                pass  # a broken connection: release closes it

    threads = [threading.Thread(target=copy_lane, args=(lane, conn), name=f"streamfill-route-{lane.route}",
                                daemon=True) for lane, conn in zip(plan.lanes, conns)]
    for thread in threads:
        thread.start()
    try:
        for batch in batches:
            routes = batch.column(ROUTE_COLUMN)
            placed = 0
            for route, feed in feeds.items():
                part = batch.filter(pc.fill_null(pc.equal(routes, route), False))
                if part.num_rows:
                    counts[route] += part.num_rows
                    placed += part.num_rows
                    feed.put(part)
            if placed != batch.num_rows:
                names = set(pc.unique(routes).to_pylist()) - set(feeds)
                raise SinkError(f"{batch.num_rows - placed} valid row(s) name no table of the write in _route "
                                f"({', '.join(map(str, names))}); routes: {', '.join(feeds)}")
    except BaseException as exc:
        failures.append(exc)  # before the end markers: no table's part commits
        raise
    finally:
        for feed in feeds.values():
            feed.put(None)
        for thread in threads:
            thread.join()
        for conn in conns:
            kept.release(conn)
    if failures:
        raise failures[0]
    return counts


def _copy(cur, table: sql.Composable, names: list[str], batches: Iterator[pa.RecordBatch], write_id: str) -> None:
    """The batches' `names` columns and the write id into `table`, by one binary COPY (none without rows)."""
    chunks = copy.encode(batches, names, write_id)
    first = next(chunks, None)
    if first is not None:
        cur.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT binary)").format(
            table, sql.SQL(", ").join(map(sql.Identifier, [*names, copy.WRITE_ID]))),
            copy.CopySource(itertools.chain([first], chunks)))


def _widen(offsets: dict[tuple[str, int], tuple[int, int]], batch: pa.RecordBatch) -> None:
    """Lowest and highest offset per (topic, partition) of the rows staged so far."""
    grouped = pa.Table.from_batches([batch]).select(["topic", "partition", "offset"]).group_by(
        ["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")]).to_pydict()
    for t, p, low, high in zip(grouped["topic"], grouped["partition"], grouped["offset_min"], grouped["offset_max"]):
        if t is None or p is None or low is None:
            continue
        was = offsets.get((t, p))
        offsets[(t, p)] = (low, high) if was is None else (min(was[0], low), max(was[1], high))


def _write_ids(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
    return [m.write_id for m in messages if isinstance(m, StagedWrite)]


@dataclass(frozen=True)
class _Staged:
    """This batch's staged rows, as the protocol's commit moves them."""

    plan: SinkPlan
    writes: list[StagedWrite]

    @property
    def write_ids(self) -> list[str]:
        return [w.write_id for w in self.writes]

    @property
    def dead_letters(self) -> StagedDeadLetters | None:
        from streamfill.offsets_db.exactly_once import StagedDeadLetters

        return StagedDeadLetters(self.plan.stage.dead_ident, self.write_ids) if self.plan.stage.dead_letters \
            else None

    @property
    def offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        merged: dict[TopicPartition, tuple[int, int]] = {}
        for w in self.writes:
            for (t, p), (low, high) in w.offsets.items():
                was = merged.get(TopicPartition(t, p))
                merged[TopicPartition(t, p)] = (low, high) if was is None else (min(was[0], low), max(was[1], high))
        return merged

    def move(self, cur) -> int:
        """The valid staged rows into the target; every row and dead letter a task staged must still be there:
        an UNLOGGED stage is emptied by a PostgreSQL crash, so a task that staged before one and a retried task
        that staged after it leave a stage holding only the retry's part."""
        plan, opts = self.plan, self.plan.options
        dead = sum(w.dead for w in self.writes)
        rows, refused, whole, valid_total = 0, 0, True, 0
        # tables in one order for every write: two routed jobs sharing tables take their locks alike
        for lane in sorted(plan.lanes, key=lambda lane: (lane.target.schema, lane.target.table)):
            valid = sum(w.valid_in(lane) for w in self.writes)
            valid_total += valid
            if not valid:
                continue
            move.lock(cur, lane.target)
            moved = move.move(cur, lane.target, lane.stage, self.write_ids, lane.mode, lane.version, valid,
                              deletes=opts.deletes, job=opts.job, staged_deletes=sum(w.deletes for w in self.writes))
            rows, refused, whole = rows + moved.rows, refused + moved.refused, whole and moved.whole
        if whole:  # the plain INSERTs took every valid row: the dead letters are what is left to count
            expected, found = dead, (stage.count(cur, plan.stage, self.write_ids, dead_only=True) if dead else 0)
        else:  # rows the table refused were copied to the dead letters' table meanwhile
            expected = valid_total + dead + refused
            found = sum(stage.count(cur, lane.stage, self.write_ids) for lane in plan.lanes)
        if found != expected:
            raise SinkError(f"{plan.target.schema}.{plan.target.table}: {found:,} staged rows and dead letters found "
                            f"where the tasks staged {expected:,} (PostgreSQL restarted after a crash since they "
                            "wrote, which empties the UNLOGGED staging table). Nothing is committed; the batch "
                            "fails and Spark replays it")
        return rows


def _cleanup(plan: SinkPlan) -> None:
    """After the commit: empty a stream's stage (rows of failed task attempts included) or drop a single
    write's. Never blocks for long behind a straggling task's COPY: the next commit or sweep does it then."""
    try:
        conn = plan.connect()
    except psycopg2.OperationalError as exc:
        log.warning("staging table %s not cleaned (%s); the next commit or sweep does it", plan.stage.name, exc)
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '5s'")
            for lane in plan.lanes:
                if plan.own_stage:
                    stage.drop(cur, lane.stage)
                else:
                    stage.discard(cur, lane.stage)
        conn.commit()
    except psycopg2.Error as exc:
        log.warning("staging table %s not cleaned (%s); the next commit or sweep does it", plan.stage.name,
                    str(exc).strip())
    finally:
        kept.release(conn)


def _commit(plan: SinkPlan, messages: Sequence[WriterCommitMessage | None], spark_batch_id: int | None) -> None:
    from streamfill.connectors.spark.tracking import mirror_to_group
    from streamfill.offsets_db import exactly_once
    from streamfill.offsets_db.engine import shared_engine

    worker_gc.settle()  # after the imports above: the first commit in a worker loads the protocol
    failpoints.hit("sink.staged")
    writes = [m for m in messages if isinstance(m, StagedWrite)]
    done = exactly_once.commit_batch(shared_engine(plan.url), plan.options.job, _Staged(plan, writes),
                                     spark_batch_id=spark_batch_id, generation=plan.options.generation,
                                     ends=plan.options.ends)
    _cleanup(plan)
    if not done.replay:
        log.info("%s.%s: %d rows and %d dead letters from %d writes committed", plan.target.schema,
                 plan.target.table, done.rows, done.dead_letters, len(writes))
    if done.config.get("commit_to_group"):
        mirror_to_group(done.config, done.snapshot)
    failpoints.hit("sink.committed")


def _abort(plan: SinkPlan, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Best effort: staged rows never reach the target without a commit, and the next commit clears them."""
    try:
        conn = plan.connect()
    except psycopg2.OperationalError as exc:
        log.warning("abort could not reach PostgreSQL (%s); staged rows stay until the next commit", exc)
        return
    try:
        with conn.cursor() as cur:
            for lane in plan.lanes:
                if plan.own_stage:
                    stage.drop(cur, lane.stage)
                else:
                    stage.discard(cur, lane.stage, _write_ids(messages))
        conn.commit()
    finally:
        kept.release(conn)


class PostgresBatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        return _stage(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.plan, messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.plan, messages)


class PostgresStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        return _stage(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.plan, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.plan, messages)

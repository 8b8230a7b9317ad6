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
class SinkPlan:
    """Everything a task and the commit need, decided once on the driver."""

    url: str
    options: SinkOptions
    target: Target
    stage: Stage
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
    columns = [Column(f.name, opts.column_types.get(f.name) or pg_type(f.name, f.dataType), pg_type(f.name, f.dataType))
               for f in schema.fields if f.name not in opts.staged_only]
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
        if opts.job is not None:
            _require_offsets_db(conn, url)
            _require_grants(conn, opts)
        target_table = target.prepare(conn, opts.schema, opts.table, columns, opts.key, opts.evolve, change)
        stage_table = stage.stage_for(target_table, owner, opts.dead_letters)
        if stage_it:
            stage.create(conn, stage_table, target_table, stage.WRITE if own_stage else stage.STREAM,
                         PgSettings().stage_orphan_after_s, opts.job, opts.generation)
    finally:
        kept.release(conn)
    ranged = opts.job is not None and {"topic", "partition", "offset"} <= set(schema.fieldNames())
    return SinkPlan(url, opts, target_table, stage_table, own_stage=own_stage, ranged=ranged)


def _require_grants(conn, opts) -> None:
    """offsets_db is at this code's migration revision, and a job's role may write it and its table
    (docs/infrastructure.md): either failing fails the launch here, before anything is recorded, naming the fix."""
    from streamfill.offsets_db import grants, revision

    with conn.cursor() as cur:
        revision.check(cur)
        grants.check_job_role(cur)
        if opts.schema is not None:
            target.check_schema(cur, opts.schema, opts.table)
        schema = target.schema_or_current(cur, opts.schema)
        exists = bool(target.existing_columns(cur, schema, opts.table))
        grants.check_target(cur, schema, opts.table, exists,
                            ("SELECT", "INSERT", "UPDATE") if opts.mode == REPLACE else ("SELECT", "INSERT"))


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
    seen = {"rows": 0, "dead": 0}
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
            if not stage_table.dead_letters:
                yield batch
                continue
            bad = pc.is_valid(batch.column("_error"))
            if pc.any(bad).as_py():
                letters = batch.filter(bad)
                seen["dead"] += letters.num_rows
                dead.append(letters)
                batch = batch.filter(pc.invert(bad))
            yield batch

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
            _copy(cur, stage_table.ident, stage_table.names, valid_spilling(), write_id)
            _copy(cur, stage_table.dead_ident, stage_table.dead_names, iter(dead), write_id)
        if spill is not None:
            spill.commit()
        conn.commit()
    finally:
        kept.release(conn)
        if spill is not None:
            kept.release(spill)
    return StagedWrite(write_id, seen["rows"], offsets, seen["dead"])


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
        valid = sum(w.rows - w.dead for w in self.writes)
        dead = sum(w.dead for w in self.writes)
        moved = move.Moved(0, 0, whole=False)
        if valid:
            move.lock(cur, plan.target)
            moved = move.move(cur, plan.target, plan.stage, self.write_ids, opts.mode, opts.version, valid)
        if moved.whole:  # the plain INSERT took every valid row: the dead letters are what is left to count
            expected, found = dead, (stage.count(cur, plan.stage, self.write_ids, dead_only=True) if dead else 0)
        else:  # rows the table refused were copied to the dead letters' table meanwhile
            expected, found = valid + dead + moved.refused, stage.count(cur, plan.stage, self.write_ids)
        if found != expected:
            raise SinkError(f"{plan.target.schema}.{plan.target.table}: {found:,} staged rows and dead letters found "
                            f"where the tasks staged {expected:,} (PostgreSQL restarted after a crash since they "
                            "wrote, which empties the UNLOGGED staging table). Nothing is committed; the batch "
                            "fails and Spark replays it")
        return moved.rows


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
            if plan.own_stage:
                stage.drop(cur, plan.stage)
            else:
                stage.discard(cur, plan.stage)
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
            if plan.own_stage:
                stage.drop(cur, plan.stage)
            else:
                stage.discard(cur, plan.stage, _write_ids(messages))
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

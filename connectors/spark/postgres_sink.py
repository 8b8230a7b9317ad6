"""`streamfill_postgres`: the exactly-once Postgres sink for df.write and writeStream (design §3).

Tasks COPY their rows into a staging table under a write id of their own and return it with how many rows
they staged and, per partition, the lowest and highest offset among them. The driver's commit hands the
protocol (`offsets_db.exactly_once.commit_batch`) the rows to move: exactly the staged rows named by the
commit messages, checked to be the batch's (their offsets) and all there (their count: the stage is UNLOGGED,
and a PostgreSQL crash empties it). The protocol runs the one transaction that also commits the batch's
offsets and resume snapshot, for the launch that holds the job only (`jobGeneration`, design §8); a batch
already committed (a replay) moves nothing. Rows of failed task attempts are never named, so they never land.
After the commit a stream's stage is emptied and a single write's stage (a backfill chunk) is dropped.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.postgres import copy, kept, partitions, target
from connectors.postgres.partitions import Part
from connectors.postgres.target import Column, Target
from connectors.spark import worker_gc
from streamfill import failpoints
from streamfill.errors import OptionError, SinkError
from streamfill.names import parse_table, validate_job_name
from streamfill.partitions import Positions, TopicPartition, from_json_shape

if TYPE_CHECKING:  # the driver's and the commit's side (SQLAlchemy, offsets_db) is imported where it runs, so a
    # task's cold Python worker loads only what a task uses: psycopg2, pyarrow, pgpq
    from offsets_db.exactly_once import StagedDeadLetters

log = logging.getLogger("streamfill.postgres_sink")

# below this many rows a task's own table (CREATE, index, ATTACH, a later merge) costs more than staging its rows
ATTACH_MIN_ROWS = 10_000

_SIMPLE: list[tuple[type[DataType], str]] = [
    (StringType, "text"), (BinaryType, "bytea"), (BooleanType, "boolean"), (ByteType, "smallint"),
    (ShortType, "smallint"), (IntegerType, "integer"), (LongType, "bigint"), (FloatType, "real"),
    (DoubleType, "double precision"), (DateType, "date"), (TimestampNTZType, "timestamp"),
    (TimestampType, "timestamptz"),
]


def pg_type(name: str, t: DataType) -> str:
    if isinstance(t, DecimalType):
        return f"numeric({int(t.precision)}, {int(t.scale)})"
    if isinstance(t, (ArrayType, MapType, StructType)):
        return "jsonb"
    for cls, pg in _SIMPLE:
        if isinstance(t, cls):
            return pg
    raise SinkError(f"column {name!r} has Spark type {t.simpleString()}, which streamfill_postgres cannot store; "
                    "cast it (e.g. to string) before writing")


def dsn(url: str) -> str:
    """libpq's form of a SQLAlchemy URL."""
    from sqlalchemy import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class StagedWrite(WriterCommitMessage):
    write_id: str
    rows: int  # every row of the task attempt: staged, and in its parts
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # per partition: lowest, highest
    parts: list[Part] = field(default_factory=list)  # tables of valid rows to attach (a partitioned target)

    @property
    def staged_rows(self) -> int:
        return self.rows - sum(p.rows for p in self.parts)


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
    target: Target
    mode: str
    job: str | None
    own_stage: bool  # a stage of this write alone (a df.write, or no job): dropped after its commit
    generation: int | None = None  # the launch's hold on the job (jobGeneration), checked at commit
    ends: Positions | None = None  # endingOffsets: the commit takes the batch planned to end there
    ranged: bool = False  # rows carry topic, partition and offset: commit messages name their offsets
    attach_min_rows: int = ATTACH_MIN_ROWS  # a task with fewer rows stages them (a table each costs more)
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


def prepare_table(options: dict, schema: StructType) -> None:
    """Create, check or evolve the target now, on the driver, before a query reads anything: what the sink
    does when Spark first asks it for a writer (its staging table is made then)."""
    _plan(options, schema, False, streaming=False, stage=False)


def _plan(options: dict, schema: StructType, overwrite: bool, *, streaming: bool, stage: bool = True) -> SinkPlan:
    worker_gc.settle()
    opts = {k.lower(): v for k, v in options.items()}
    if overwrite:
        raise SinkError("streamfill_postgres does not truncate tables (SaveMode overwrite); use .mode('append') "
                        "with option mode=replace to upsert rows by key")
    schema_name, table = parse_table(opts.get("table"))
    mode = target.parse_mode(opts.get("mode"))
    job = opts.get("job")
    if job is not None:
        validate_job_name(job)
    dead_letters = _bool(opts, "deadLetters")
    staged_only = tuple(n for n, _ in target.DEAD_LETTER_COLUMNS) if dead_letters else ()
    if dead_letters:
        missing = [n for n in (*staged_only, "topic", "partition", "offset") if n not in schema.fieldNames()]
        if job is None or missing:
            raise OptionError("deadLetters", opts["deadletters"], "needs the job option and the columns _error, "
                              f"_raw, topic, partition and offset (missing: {', '.join(missing) or 'none'}; job: "
                              f"{job})", "Build the DataFrame with a pipeline's parse (spark_jobs.pipelines)")
    declared = _column_types(opts.get("columntypes"), schema.fieldNames())
    columns = [Column(f.name, declared.get(f.name) or pg_type(f.name, f.dataType), pg_type(f.name, f.dataType))
               for f in schema.fields if f.name not in staged_only]
    key = target.parse_key(opts.get("keycolumns"), [c.name for c in columns])
    evolve = _bool(opts, "evolveSchema")
    raw_min = opts.get("attachminrows", str(ATTACH_MIN_ROWS))
    if not str(raw_min).isdigit():
        raise OptionError("attachMinRows", raw_min, "must be a whole number of rows, 0 or more",
                          f"Leave it out (default {ATTACH_MIN_ROWS:,}) or give e.g. 50000")
    attach_min_rows = int(raw_min)
    publish = (opts.get("publish") or "attach").strip().lower()
    if publish not in ("attach", "insert"):
        raise OptionError("publish", opts.get("publish"), "is not a way to publish rows",
                          "Use attach (a new table is partitioned and each task's rows are attached) or insert")
    generation = _generation(opts, job)
    ends = _ending_offsets(opts, job, streaming)
    if job is not None and generation is None and not streaming and stage:  # a write, not prepare_table's check
        raise OptionError("jobGeneration", None, "is needed by a bounded write with a job: without it the commit "
                          "could not tell this write's batch from another launch's", "Take the job first and pass "
                          "its generation to the read and the write (connectors.spark.hold_job), or run it as "
                          "`streamfill backfill`")
    if job is None and streaming:
        raise OptionError("job", None, "is needed by a stream into streamfill_postgres (each micro-batch commits "
                          "with the job's offsets)", "Give the source and the sink the same .option('job', NAME)")
    from sqlalchemy import make_url

    from streamfill.pg import PgSettings, connect_args
    from streamfill.settings import default_db_url

    url = opts.get("url") or default_db_url()
    own_stage = job is None or not streaming
    owner = f"{job or 'write'}-{uuid.uuid4().hex}" if own_stage else job
    try:
        conn = kept.connect(dsn(url), **connect_args())
    except psycopg2.OperationalError as exc:
        raise SinkError(f"cannot connect to PostgreSQL at {make_url(url).render_as_string()}: "
                        f"{str(exc).strip()}. Start it (streamfill stack up) or fix the url option / "
                        "STREAMFILL_DB_URL") from None
    try:
        if job is not None:
            _require_offsets_db(conn, url)
        tgt = target.prepare(conn, schema_name, table, columns, key, owner, dead_letters, evolve,
                             partition=mode == "append-new" and publish == "attach")
        if stage:
            target.create_stage(conn, tgt, "write" if own_stage else "stream", PgSettings().stage_orphan_after_s)
    finally:
        kept.release(conn)
    ranged = job is not None and {"topic", "partition", "offset"} <= set(schema.fieldNames())
    return SinkPlan(url, tgt, mode, job, own_stage=own_stage, generation=generation, ends=ends, ranged=ranged,
                    attach_min_rows=attach_min_rows)


def _generation(opts: dict, job: str | None) -> int | None:
    raw = opts.get("jobgeneration")
    if raw is None:
        return None
    if job is None or not raw.isdigit() or int(raw) < 1:
        raise OptionError("jobGeneration", raw, "must be a positive whole number, with the job option",
                          "Leave it out (the source holds the job), or pass the generation of the launch's lease")
    return int(raw)


def _ending_offsets(opts: dict, job: str | None, streaming: bool) -> Positions | None:
    """`endingOffsets` of a bounded write with a job: {"topic": {"0": 123}}, the ends its read was given. The
    commit takes the batch planned to end exactly there, so a launch may plan its next batch before this one
    commits (without it, the commit takes the job's newest planned batch)."""
    raw = opts.get("endingoffsets")
    if raw is None:
        return None
    fix = 'Give the ends the read was given, as {"topic": {"0": 123}}, with the job option, on a df.write'
    if job is None or streaming:
        raise OptionError("endingOffsets", raw, "is for a bounded write with a job", fix)
    try:
        ends = from_json_shape(json.loads(raw))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise OptionError("endingOffsets", raw, "is not a JSON object of topics, partitions and offsets",
                          fix) from None
    if not ends or any(tp.partition < 0 or end < 0 for tp, end in ends.items()):
        raise OptionError("endingOffsets", raw, "needs at least one partition, with offsets of 0 or more", fix)
    return ends


# the PostgreSQL types a `columnTypes` option may name (they are written into CREATE TABLE as they are)
_PG_TYPE = re.compile(r"text|integer|bigint|smallint|real|double precision|numeric\(\d{1,2}, ?\d{1,2}\)|boolean|date|"
                      r"timestamptz|timestamp|jsonb|bytea")


def _column_types(raw: str | None, names: list[str]) -> dict[str, str]:
    """`columnTypes`: JSON {column: PostgreSQL type} for columns whose Spark type alone does not say (json text
    kept as jsonb, a declared numeric(p,s))."""
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError("columnTypes", raw, f"is not valid JSON ({exc.msg})",
                          'Write it as {"meta": "jsonb"}') from None
    if not isinstance(parsed, dict):
        raise OptionError("columnTypes", raw, "must map column names to types", 'Write it as {"meta": "jsonb"}')
    for name, pg in parsed.items():
        if name not in names:
            raise OptionError("columnTypes", raw, f"column {name!r} is not in the DataFrame",
                              f"Name columns that exist ({', '.join(names)})")
        if not isinstance(pg, str) or not _PG_TYPE.fullmatch(pg):
            raise OptionError("columnTypes", raw, f"type {pg!r} of column {name} is not one the sink writes",
                              "Use text, integer, bigint, double precision, numeric(p,s), boolean, date, timestamptz, "
                              "jsonb or bytea")
    return parsed


def _bool(opts: dict, name: str) -> bool:
    raw = str(opts.get(name.lower(), "false")).lower()
    if raw not in ("true", "false"):
        raise OptionError(name, opts[name.lower()], "is not a boolean", "Use true or false")
    return raw == "true"


def _require_offsets_db(conn, url: str) -> None:
    from sqlalchemy import make_url

    from offsets_db import exactly_once

    if not exactly_once.installed(conn):
        raise SinkError(f"the database at {make_url(url).render_as_string()} has no offsets_db tables, and a "
                        "job's offsets commit in the same transaction as its rows. Run `streamfill db "
                        "upgrade` with STREAMFILL_DB_URL pointing there")


def _stage(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> StagedWrite:
    """One task attempt under a fresh write id: valid rows of one Kafka partition into a part of their own when
    the target is partitioned (`partitions`), every other row into the staging table, each by one binary COPY."""
    worker_gc.settle()
    write_id = uuid.uuid4().hex
    seen = {"rows": 0}
    offsets: dict[tuple[str, int], tuple[int, int]] = {}

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            seen["rows"] += batch.num_rows
            if plan.ranged and batch.num_rows:
                _widen(offsets, batch)
            yield batch

    conn = plan.connect()
    try:
        with conn.cursor() as cur:
            head: list[pa.RecordBatch] = []
            rows = counted()
            if plan.target.partitioned and plan.ranged:
                for batch in rows:  # a few rows are staged: a table of their own would cost more than them
                    head.append(batch)
                    if sum(b.num_rows for b in head) >= plan.attach_min_rows:
                        break
            if plan.target.partitioned and plan.ranged and sum(b.num_rows for b in head) >= plan.attach_min_rows:
                rest: list[pa.RecordBatch] = []
                parts = _copy_part(cur, plan, write_id, itertools.chain(head, rows), rest)
                _copy_stage(cur, plan, write_id, iter(rest))
            else:
                parts = []
                _copy_stage(cur, plan, write_id, itertools.chain(head, rows))
        conn.commit()
    finally:
        kept.release(conn)
    return StagedWrite(write_id, seen["rows"], offsets, parts)


def _copy_stage(cur, plan: SinkPlan, write_id: str, batches: Iterator[pa.RecordBatch]) -> None:
    names = plan.target.staged_names
    chunks = copy.encode(batches, names, write_id)
    first = next(chunks, None)
    if first is not None:
        cur.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT binary)").format(
            plan.target.stage_ident, sql.SQL(", ").join(map(sql.Identifier, [*names, copy.WRITE_ID]))),
            copy.CopySource(itertools.chain([first], chunks)))


def _copy_part(cur, plan: SinkPlan, write_id: str, batches: Iterator[pa.RecordBatch],
               rest: list[pa.RecordBatch]) -> list[Part]:
    """Valid rows of the first Kafka partition seen into a new part, sealed for ATTACH; dead letters and rows of
    other partitions are kept in `rest` for the stage (a task reads one Kafka partition, so rest is small)."""
    tgt = plan.target
    seen: dict[str, object] = {"tp": None, "low": None, "high": None, "rows": 0}

    def mine() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not batch.num_rows:
                continue
            keep = pc.is_valid(batch.column("topic")) if not tgt.dead_letters else pc.and_(
                pc.is_null(batch.column("_error")), pc.is_valid(batch.column("topic")))
            keep = pc.and_(keep, pc.is_valid(batch.column("partition")))
            keep = pc.and_(keep, pc.is_valid(batch.column("offset")))
            if seen["tp"] is None:
                first = batch.filter(keep)
                if first.num_rows:
                    seen["tp"] = (first.column("topic")[0].as_py(), first.column("partition")[0].as_py())
            if seen["tp"] is not None:
                topic, partition = seen["tp"]
                keep = pc.and_(keep, pc.and_(pc.equal(batch.column("topic"), topic),
                                             pc.equal(batch.column("partition"), partition)))
            keep = pc.fill_null(keep, False)
            ours, others = batch.filter(keep), batch.filter(pc.invert(keep))
            if others.num_rows:
                rest.append(others)
            if ours.num_rows:
                low, high = pc.min_max(ours.column("offset")).values()
                seen["low"] = low.as_py() if seen["low"] is None else min(seen["low"], low.as_py())
                seen["high"] = high.as_py() if seen["high"] is None else max(seen["high"], high.as_py())
                seen["rows"] += ours.num_rows
                yield ours

    chunks = copy.encode(mine(), tgt.names, None)
    first = next(chunks, None)
    if first is None:
        return []
    name = partitions.part_name(tgt.table, write_id)
    partitions.create_part(cur, tgt.schema, tgt.table, name)
    cur.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT binary)").format(
        sql.Identifier(tgt.schema, name), sql.SQL(", ").join(map(sql.Identifier, tgt.names))),
        copy.CopySource(itertools.chain([first], chunks)))
    topic, partition = seen["tp"]
    return [partitions.seal_part(cur, tgt.schema, Part(name, topic, partition, seen["low"], seen["high"] + 1,
                                                       seen["rows"]))]


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
        from offsets_db.exactly_once import StagedDeadLetters

        return StagedDeadLetters(self.plan.target.stage_ident, self.write_ids) if self.plan.target.dead_letters \
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
        """Every staged row must still be there (an UNLOGGED stage is emptied by a PostgreSQL crash); then the
        staged rows move and each part is attached (or inserted when it cannot be)."""
        expected = sum(w.staged_rows for w in self.writes)
        found = target.count_staged(cur, self.plan.target, self.write_ids)
        if found != expected:
            raise SinkError(f"{self.plan.target.schema}.{self.plan.target.table}: {found:,} staged rows found where "
                            f"the tasks staged {expected:,} (PostgreSQL restarted after a crash since they wrote, "
                            "which empties the UNLOGGED staging table). Nothing is committed; the batch fails and "
                            "Spark replays it")
        tgt = self.plan.target
        moved = target.move(cur, tgt, self.write_ids, self.plan.mode) if expected else 0
        for part in (p for w in self.writes for p in w.parts):
            moved += partitions.publish(cur, tgt.schema, tgt.table, tgt.names, part)
        return moved


def _cleanup(plan: SinkPlan, writes: Sequence[StagedWrite]) -> None:
    """After the commit: empty a stream's stage (rows of failed task attempts included) or drop a single
    write's, and drop the parts that were inserted rather than attached (or not used: a replay). Never blocks
    for long behind a straggling task's COPY: the next commit or sweep does it then."""
    try:
        conn = plan.connect()
    except psycopg2.OperationalError as exc:
        log.warning("staging table %s not cleaned (%s); the next commit or sweep does it", plan.target.stage, exc)
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '5s'")
            if plan.own_stage:
                target.drop_stage(cur, plan.target)
            else:
                target.discard(cur, plan.target)
            partitions.drop_unattached(cur, plan.target.schema, [p.table for w in writes for p in w.parts])
        conn.commit()
        if plan.target.partitioned:
            _merge_later(plan)
    except psycopg2.Error as exc:
        log.warning("staging table %s not cleaned (%s); the next commit or sweep does it", plan.target.stage,
                    str(exc).strip())
    finally:
        kept.release(conn)


MERGE_WAIT = "5min"  # how long a merge waits for another process's merge of the same target
_merging: set[tuple[str, str, str]] = set()  # targets a thread of this process merges now
_again: set[tuple[str, str, str]] = set()  # of those, targets committed into since that thread's last look
_merge_state = threading.Lock()


def _merge_later(plan: SinkPlan) -> None:
    """Merge the target's small partitions in a thread of the Python worker that ran the commit, off the
    commit's path; one at a time per target. A commit during a merge has the thread look again when it ends,
    and it goes on while it merges something. Stopping Spark cuts it short (`merge_remaining` finishes first);
    a merge cut short leaves an unattached table the sweep drops."""
    key = (plan.url, plan.target.schema, plan.target.table)
    with _merge_state:
        if key in _merging:
            _again.add(key)
            return
        _merging.add(key)
        _again.add(key)  # the thread's first look

    def merge() -> None:
        merged = 0
        try:
            while True:
                with _merge_state:  # stopping and a commit's look at _merging happen one after the other
                    if not merged and key not in _again:
                        _merging.discard(key)
                        return
                    _again.discard(key)
                try:
                    merged = _merge_once(plan)
                except Exception:  # noqa: BLE001 - a bug in one pass must not lose the commits that came during it
                    log.exception("%s.%s: merging partitions failed", plan.target.schema, plan.target.table)
                    merged = 0
        except BaseException:
            with _merge_state:
                _merging.discard(key)
                _again.discard(key)
            raise

    threading.Thread(target=merge, name=f"streamfill-merge-{plan.target.table}", daemon=True).start()


def merge_remaining(url: str, table: str) -> int:
    """On the driver, before Spark stops: wait for a merge of `table`'s small partitions that a commit's worker
    runs, then merge what is still due. Stopping Spark would cut that worker's merge short and leave the rest to
    the next write into the table. Returns the partitions merged away here."""
    from streamfill.pg import connect_args

    schema, name = parse_table(table)
    conn = psycopg2.connect(dsn(url), **connect_args())
    try:
        with conn.cursor() as cur:
            schema = target.schema_or_current(cur, schema)
        conn.commit()
        total = 0
        while merged := partitions.merge_small(conn, schema, name, wait=MERGE_WAIT):
            total += merged
        return total
    finally:
        conn.close()


def _merge_once(plan: SinkPlan) -> int:
    """One pass of merge_small over the target; the partitions it merged away (0 when put off)."""
    try:
        conn = plan.connect()
        try:
            # another process's merge of this target (a second chunk's commit) is waited for, not skipped
            merged = partitions.merge_small(conn, plan.target.schema, plan.target.table, wait=MERGE_WAIT)
            if merged:
                log.info("%s.%s: %d small partitions merged", plan.target.schema, plan.target.table, merged)
            return merged
        finally:
            kept.release(conn)
    except psycopg2.Error as exc:
        log.warning("%s.%s: merging partitions put off (%s)", plan.target.schema, plan.target.table,
                    str(exc).strip())
        return 0


def _commit(plan: SinkPlan, messages: Sequence[WriterCommitMessage | None], spark_batch_id: int | None) -> None:
    from connectors.spark.tracking import mirror_to_group
    from offsets_db import exactly_once
    from offsets_db.engine import shared_engine

    worker_gc.settle()  # after the imports above: the first commit in a worker loads the protocol
    failpoints.hit("sink.staged")
    writes = [m for m in messages if isinstance(m, StagedWrite)]
    ids = [w.write_id for w in writes]
    done = exactly_once.commit_batch(shared_engine(plan.url), plan.job, _Staged(plan, writes),
                                     spark_batch_id=spark_batch_id, generation=plan.generation, ends=plan.ends)
    _cleanup(plan, writes)
    if not done.replay:
        log.info("%s.%s: %d rows and %d dead letters from %d writes committed", plan.target.schema,
                 plan.target.table, done.rows, done.dead_letters, len(ids))
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
                target.drop_stage(cur, plan.target)
            else:
                target.discard(cur, plan.target, _write_ids(messages))
            partitions.drop_unattached(cur, plan.target.schema, [p.table for m in messages
                                                                 if isinstance(m, StagedWrite) for p in m.parts])
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

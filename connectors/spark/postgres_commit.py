"""The driver's end of a `streamfill_postgres` write: the commit hands the protocol (`offsets_db.batch_commit`)
exactly the staged rows the tasks' messages name, checked to be all there, and empties or drops the stage after
it; an abort clears what the tasks staged."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import psycopg2
from pyspark.sql.datasource import WriterCommitMessage

from streamfill import failpoints
from streamfill.connectors.postgres import move, pool, stage
from streamfill.connectors.spark import worker_gc
from streamfill.connectors.spark.postgres_plan import SinkPlan
from streamfill.connectors.spark.postgres_staging import StagedWrite, widen_range
from streamfill.errors import SinkError
from streamfill.partitions import TopicPartition

if TYPE_CHECKING:  # the protocol (SQLAlchemy, offsets_db) is imported where the commit runs, so a task's cold
    # Python worker, which imports this module with the writers, loads only what a task uses
    from streamfill.offsets_db.batch_commit import StagedBatch

log = logging.getLogger("streamfill.postgres_sink")

def _write_ids(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
    return [m.write_id for m in messages if isinstance(m, StagedWrite)]


def _staged_batch(plan: SinkPlan, writes: list[StagedWrite]) -> StagedBatch:
    """This batch's staged rows, as the protocol's commit moves them."""
    from streamfill.offsets_db.batch_commit import StagedBatch

    offsets: dict[TopicPartition, tuple[int, int]] = {}
    for w in writes:
        for (t, p), (low, high) in w.offsets.items():
            widen_range(offsets, TopicPartition(t, p), low, high)
    write_ids = [w.write_id for w in writes]
    return StagedBatch(offsets, write_ids, plan.stage.dead_ident if plan.stage.dead_letters else None,
                       partial(_move_rows, plan, writes, write_ids))


def _move_rows(plan: SinkPlan, writes: list[StagedWrite], write_ids: list[str], cur) -> int:
    """The valid staged rows into the target; every row and dead letter a task staged must still be there:
    an UNLOGGED stage is emptied by a PostgreSQL crash, so a task that staged before one and a retried task
    that staged after it leave a stage holding only the retry's part."""
    opts = plan.options
    dead = sum(w.dead for w in writes)
    rows, refused, whole, valid_total = 0, 0, True, 0
    # tables in one order for every write: two routed jobs sharing tables take their locks alike
    for lane in sorted(plan.lanes, key=lambda lane: (lane.target.schema, lane.target.table)):
        valid = sum(w.valid_in(lane) for w in writes)
        valid_total += valid
        if not valid:
            continue
        move.lock(cur, lane.target)
        moved = move.move(cur, lane.target, lane.stage, write_ids, lane.mode, lane.version, valid,
                          deletes=opts.deletes, job=opts.job, staged_deletes=sum(w.deletes for w in writes),
                          guarded=plan.guarded)
        rows, refused, whole = rows + moved.rows, refused + moved.refused, whole and moved.whole
    if whole:  # the plain INSERTs took every valid row: the dead letters are what is left to count
        expected, found = dead, (stage.count(cur, plan.stage, write_ids, dead_only=True) if dead else 0)
    else:  # rows the table refused were copied to the dead letters' table meanwhile
        expected = valid_total + dead + refused
        found = sum(stage.count(cur, lane.stage, write_ids) for lane in plan.lanes)
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
            _clear(cur, plan)
        conn.commit()
    except psycopg2.Error as exc:
        log.warning("staging table %s not cleaned (%s); the next commit or sweep does it", plan.stage.name,
                    str(exc).strip())
    finally:
        pool.release(conn)


def commit(plan: SinkPlan, messages: Sequence[WriterCommitMessage | None], spark_batch_id: int | None) -> None:
    """The batch the messages name committed by the protocol, in one transaction with its offsets, then its
    stage emptied (a stream's) or dropped (a single write's)."""
    from streamfill.connectors.spark.job_offsets import mirror_to_group
    from streamfill.offsets_db import batch_commit
    from streamfill.offsets_db.engine import shared_engine

    worker_gc.freeze_after_imports()  # after the imports above: the first commit in a worker loads the protocol
    failpoints.hit("sink.staged")
    writes = [m for m in messages if isinstance(m, StagedWrite)]
    done = batch_commit.commit_batch(shared_engine(plan.url), plan.options.job, _staged_batch(plan, writes),
                                     spark_batch_id=spark_batch_id, generation=plan.options.generation,
                                     ends=plan.options.ends)
    _cleanup(plan)
    if not done.replay:
        log.info("%s.%s: %d rows and %d dead letters from %d writes committed", plan.target.schema,
                 plan.target.table, done.rows, done.dead_letters, len(writes))
    if done.config.get("commit_to_group"):
        mirror_to_group(done.config, done.snapshot)
    failpoints.hit("sink.committed")


def abort(plan: SinkPlan, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Best effort: staged rows never reach the target without a commit, and the next commit clears them."""
    try:
        conn = plan.connect()
    except psycopg2.OperationalError as exc:
        log.warning("abort could not reach PostgreSQL (%s); staged rows stay until the next commit", exc)
        return
    try:
        with conn.cursor() as cur:
            _clear(cur, plan, _write_ids(messages))
        conn.commit()
    finally:
        pool.release(conn)


def _clear(cur, plan: SinkPlan, write_ids: Sequence[str] | None = None) -> None:
    """Drop a single write's stages, or remove from a stream's the rows of these writes (every row with None)."""
    for lane in plan.lanes:
        if plan.own_stage:
            stage.drop(cur, lane.stage)
        else:
            stage.discard(cur, lane.stage, write_ids)

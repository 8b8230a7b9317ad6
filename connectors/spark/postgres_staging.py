"""A task's part of a `streamfill_postgres` write: its rows into the stage under a write id of its own, by binary
COPY, and the commit message naming what it staged (how many rows and dead letters, and per partition the
lowest and highest offset among them)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql
from pyspark.sql.datasource import WriterCommitMessage

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN
from streamfill.connectors.postgres import copy, pool
from streamfill.connectors.spark import worker_gc
from streamfill.connectors.spark.postgres_plan import Lane, SinkPlan
from streamfill.errors import SinkError

K = TypeVar("K")  # how a range's partition is named: (topic, partition) or a TopicPartition

DEAD_LETTERS_IN_MEMORY = 16 * 2**20  # a task's dead letters wait in memory until its rows are in, up to this


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


def stage_write(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> StagedWrite:
    """One task attempt under a fresh write id: its valid rows into the stage by one binary COPY, its dead
    letters (few) into the stage's dead-letter table after them."""
    worker_gc.freeze_after_imports()
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
                _note_offsets(offsets, batch)
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
        pool.release(conn)
        if spill is not None:
            pool.release(spill)
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
            pool.release(conn)
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
        except BaseException as exc:  # handed to the task's thread, which raises it
            failures.append(exc)
            if not ended.is_set():  # the task's thread may still be feeding this table
                for _ in fed():
                    pass
            try:
                conn.rollback()
            except psycopg2.Error:
                pass  # a broken connection: release closes it

    threads = [threading.Thread(target=copy_lane, args=(lane, conn), name=f"streamfill-route-{lane.route}",
                                daemon=True) for lane, conn in zip(plan.lanes, conns, strict=True)]
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
            pool.release(conn)
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


def _note_offsets(offsets: dict[tuple[str, int], tuple[int, int]], batch: pa.RecordBatch) -> None:
    """Lowest and highest offset per (topic, partition) of the rows staged so far."""
    grouped = pa.Table.from_batches([batch]).select(["topic", "partition", "offset"]).group_by(
        ["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")]).to_pydict()
    columns = (grouped["topic"], grouped["partition"], grouped["offset_min"], grouped["offset_max"])
    for t, p, low, high in zip(*columns, strict=True):
        if t is None or p is None or low is None:
            continue
        widen_range(offsets, (t, p), low, high)


def widen_range(ranges: dict[K, tuple[int, int]], key: K, low: int, high: int) -> None:
    """`ranges[key]`, the lowest and highest offset of a partition, widened to take in `low` and `high`."""
    was = ranges.get(key)
    ranges[key] = (low, high) if was is None else (min(was[0], low), max(was[1], high))

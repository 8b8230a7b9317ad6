"""What quality checks need from offsets_db: the offsets a job consumed, the SQL that reconciles a sink table
with them (rows landed + dead letters = offsets consumed), and the stored results (`quality_results`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine, or_, select
from sqlalchemy.orm import Session

from streamfill.names import parse_table
from streamfill.offsets_db import schema
from streamfill.offsets_db.models import Batch, BatchOffset, Job, QualityResult, RetentionHorizon, Run

Range = tuple[str, int, int, int]  # topic, partition, [start, end)


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Overlapping or touching ranges of one partition become one (a replace pass re-reads the same offsets)."""
    out: list[Range] = []
    for t, p, s, e in sorted(ranges):
        if out and out[-1][0] == t and out[-1][1] == p and s <= out[-1][3]:
            out[-1] = (t, p, out[-1][2], max(out[-1][3], e))
        elif e > s:
            out.append((t, p, s, e))
    return out


def consumed(engine: Engine, job: str) -> tuple[int | None, list[Range]]:
    """The job's id (None when unknown) and what it consumed: its committed batches' ranges, merged. After a
    prune removed dead letters, only the batches committed since its horizon, whose dead letters are all kept."""
    with Session(engine) as s:
        horizon = (select(RetentionHorizon.dead_letters_before).where(RetentionHorizon.job_id == Job.id)
                   .scalar_subquery())
        rows = s.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                                BatchOffset.end_offset)
                         .join(Batch, Batch.id == BatchOffset.batch_id).join(Job, Job.id == Batch.job_id)
                         .where(Job.name == job, Batch.committed_at.is_not(None),
                                or_(horizon.is_(None), Batch.committed_at >= horizon))).all()
        return s.scalar(select(Job.id).where(Job.name == job)), merge(tuple(r) for r in rows)


def table_ident(table: str) -> sql.Identifier:
    """`table` or `schema.table`, each part quoted."""
    return sql.Identifier(*(part for part in parse_table(table) if part))


def _ranges_sql(ranges: list[Range]) -> sql.Composable:
    return sql.SQL("(VALUES {}) AS r(topic, partition, start_offset, end_offset)").format(sql.SQL(", ").join(
        sql.SQL("({}, {}, {}, {})").format(sql.Literal(t), sql.Literal(p), sql.Literal(s), sql.Literal(e))
        for t, p, s, e in ranges))


def _in_ranges(alias: str) -> sql.Composable:
    a = sql.Identifier(alias)
    return sql.SQL("r.topic = {a}.topic AND r.partition = {a}.partition AND {a}.\"offset\" >= r.start_offset "
                   "AND {a}.\"offset\" < r.end_offset").format(a=a)


def checked_rows_and_reconciliation(engine: Engine, table: str, ranges: list[Range], whole_table: bool,
                                    job_id: int, upsert: bool = False,
                                    other_tables: Sequence[str] = ()) -> tuple[str, str]:
    """Two SQL texts: the rows to check (the whole table, or only those inside `ranges`), and a query with
    GX's `{batch}` placeholder that returns a row when rows landed + dead letters differ from the offsets
    consumed. Rows landed are the batch's and, for a routed entry, those of its `other_tables` (each record
    lands in one of its tables). In an upsert table a later version replaces an earlier one, so there the check
    is that rows landed + dead letters do not exceed the offsets consumed. Identifiers and values are quoted by
    psycopg2."""
    raw = engine.raw_connection()
    try:
        values, tbl = _ranges_sql(ranges), table_ident(table)
        if whole_table:
            subset = sql.SQL("SELECT * FROM {}").format(tbl)
        else:
            subset = sql.SQL("SELECT t.* FROM {} t WHERE EXISTS (SELECT 1 FROM {} WHERE {})").format(
                tbl, values, _in_ranges("t"))
        landed = [sql.SQL("(SELECT count(*) FROM {rows} t WHERE EXISTS (SELECT 1 FROM {v} WHERE {in_t}))").format(
            rows=rows, v=values, in_t=_in_ranges("t"))
            for rows in (sql.SQL("(SELECT * FROM {batch})"), *(table_ident(other) for other in other_tables))]
        reconcile = sql.SQL(
            "SELECT c.n AS consumed, l.n AS landed, d.n AS dead_letters FROM "
            "(SELECT sum(end_offset - start_offset) AS n FROM {v}) c, "
            "(SELECT {landed} AS n) l, "
            "(SELECT count(DISTINCT (d.topic, d.partition, d.\"offset\")) AS n FROM {dead} d "
            " WHERE d.job_id = {job} AND EXISTS (SELECT 1 FROM {v} WHERE {in_d})) d "
            "WHERE c.n {op} l.n + d.n").format(v=values, landed=sql.SQL(" + ").join(landed), in_d=_in_ranges("d"),
                                                job=sql.Literal(job_id),
                                                dead=sql.SQL(schema.qualified("dead_letters")),
                                                op=sql.SQL("<" if upsert else "<>"))
        return subset.as_string(raw.driver_connection), reconcile.as_string(raw.driver_connection)
    finally:
        raw.close()


def record_result(engine: Engine, job_id: int | None, suite: str, table: str, success: bool,
                  statistics: dict[str, Any], result: dict[str, Any]) -> int:
    """Store one validation, linked to the job's newest run (the launch whose rows it checked, or the stream
    running now); returns its quality_results id."""
    with Session(engine) as s, s.begin():
        run_id = None if job_id is None else s.scalar(
            select(Run.id).where(Run.job_id == job_id).order_by(Run.id.desc()).limit(1))
        row = QualityResult(job_id=job_id, run_id=run_id, suite=suite, table_name=table, success=success,
                            statistics=statistics, result=result)
        s.add(row)
        s.flush()
        return row.id

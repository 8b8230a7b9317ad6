"""Great Expectations suites on the sink tables, results stored in offsets_db.quality_results.

The `orders` suite: key columns not null; (topic, partition, offset) and event_id unique; values as the demo
schema says (amount range, event types, currency codes, user ids, event id length); optionally freshness;
and reconciliation: rows landed plus dead letters equal the offsets the checked job(s) consumed, from
offsets_db. Bounded runs check only their own ranges; a stream's table is checked whole.

GX is imported inside `validate` (it pulls in pyspark, seconds): DAG files stay quick to parse.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg2 import sql
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from offsets_db.models import Batch, BatchOffset, Job, QualityResult
from spark_jobs.events import CURRENCIES, EVENT_TYPES, MAX_AMOUNT

log = logging.getLogger("streamfill.quality")

Range = tuple[str, int, int, int]  # topic, partition, [start, end)


class QualityFailed(AssertionError):
    """A failing expectation: the task fails, the result is stored."""


@dataclass
class Outcome:
    success: bool
    table: str
    lines: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    result_id: int | None = None


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Overlapping or touching ranges of one partition become one (a replace pass re-reads the same offsets)."""
    out: list[Range] = []
    for t, p, s, e in sorted(ranges):
        if out and out[-1][0] == t and out[-1][1] == p and s <= out[-1][3]:
            out[-1] = (t, p, out[-1][2], max(out[-1][3], e))
        elif e > s:
            out.append((t, p, s, e))
    return out


def job_ranges(session: Session, job: str) -> list[Range]:
    """What the job consumed: its committed batches' ranges, merged."""
    rows = session.execute(select(BatchOffset.topic, BatchOffset.partition, BatchOffset.start_offset,
                                  BatchOffset.end_offset)
                           .join(Batch, Batch.id == BatchOffset.batch_id).join(Job, Job.id == Batch.job_id)
                           .where(Job.name == job, Batch.committed_at.is_not(None))).all()
    return merge(tuple(r) for r in rows)


def _ranges_sql(ranges: list[Range]) -> sql.Composable:
    return sql.SQL("(VALUES {}) AS r(topic, partition, start_offset, end_offset)").format(sql.SQL(", ").join(
        sql.SQL("({}, {}, {}, {})").format(sql.Literal(t), sql.Literal(p), sql.Literal(s), sql.Literal(e))
        for t, p, s, e in ranges))


def _in_ranges(alias: str) -> sql.Composable:
    a = sql.Identifier(alias)
    return sql.SQL("r.topic = {a}.topic AND r.partition = {a}.partition AND {a}.\"offset\" >= r.start_offset "
                   "AND {a}.\"offset\" < r.end_offset").format(a=a)


def validate(db_url: str, table: str, job: str, *, suite: str = "orders", whole_table: bool = False,
             freshness: timedelta | None = None, now: datetime | None = None) -> Outcome:
    """Run the suite on `table` for what `job` consumed; store and return the outcome (never raises on a
    failing expectation: `require` does)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    engine = create_engine(db_url)
    with Session(engine) as s:
        ranges = job_ranges(s, job)
        job_id = s.scalar(select(Job.id).where(Job.name == job))
    if not ranges:  # an hour without traffic: an empty window passes, and says so
        outcome = Outcome(True, table, [f"PASS job {job!r} consumed no offsets: nothing to check in {table}"],
                          {"evaluated_expectations": 0, "successful_expectations": 0})
        with Session(engine) as s, s.begin():
            row = QualityResult(job_id=job_id, suite=suite, table_name=table, success=True,
                                statistics=outcome.statistics, result={"note": outcome.lines[0]})
            s.add(row)
            s.flush()
            outcome.result_id = row.id
        engine.dispose()
        return outcome
    raw = engine.raw_connection()
    try:
        render = lambda q: q.as_string(raw.driver_connection)  # noqa: E731 - quoting by psycopg2
        values, tbl = _ranges_sql(ranges), sql.Identifier(table)
        if whole_table:
            subset = sql.SQL("SELECT * FROM {}").format(tbl)
        else:
            subset = sql.SQL("SELECT t.* FROM {} t WHERE EXISTS (SELECT 1 FROM {} WHERE {})").format(
                tbl, values, _in_ranges("t"))
        reconcile = sql.SQL(
            "SELECT c.n AS consumed, l.n AS landed, d.n AS dead_letters FROM "
            "(SELECT sum(end_offset - start_offset) AS n FROM {v}) c, "
            "(SELECT count(*) AS n FROM (SELECT * FROM {{batch}}) t WHERE EXISTS (SELECT 1 FROM {v} WHERE {in_t})) l, "
            "(SELECT count(DISTINCT (d.topic, d.partition, d.\"offset\")) AS n FROM dead_letters d "
            " WHERE EXISTS (SELECT 1 FROM {v} WHERE {in_d})) d "
            "WHERE c.n <> l.n + d.n").format(v=values, in_t=_in_ranges("t"), in_d=_in_ranges("d"))
        subset_q, reconcile_q = render(subset), render(reconcile)
    finally:
        raw.close()

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_or_update_postgres(name="streamfill", connection_string=db_url)
    asset = source.add_query_asset(name=f"{table}:{job}", query=subset_q)
    batch = asset.add_batch_definition_whole_table("checked rows")
    expectations = _suite(suite, reconcile_q, freshness, now)
    gx_suite = ctx.suites.add(gx.ExpectationSuite(name=f"{suite}:{table}", expectations=expectations))
    definition = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{suite}:{table}:{job}", data=batch,
                                                                        suite=gx_suite))
    res = definition.run(result_format="SUMMARY")
    outcome = Outcome(bool(res.success), table, statistics=dict(res.statistics))
    for r in res.results:
        cfg = r.expectation_config
        what = cfg.description or f"{cfg.type}({', '.join(f'{k}={v}' for k, v in cfg.kwargs.items() if k not in ('batch_id',))})"
        detail = ""
        error = (r.exception_info or {}).get("exception_message") if isinstance(r.exception_info, dict) else None
        if error:
            detail = f": could not run: {error.splitlines()[0][:300]}"
        elif not r.success:
            got = r.result or {}
            detail = f": {got.get('unexpected_count', got.get('observed_value', ''))} unexpected"
            if got.get("details", {}).get("unexpected_rows"):
                detail += f", e.g. {got['details']['unexpected_rows'][:3]}"
            elif got.get("partial_unexpected_list"):
                detail += f", e.g. {got['partial_unexpected_list'][:3]}"
        outcome.lines.append(f"{'PASS' if r.success else 'FAIL'} {what}{detail}")
    with Session(engine) as s, s.begin():
        row = QualityResult(job_id=job_id, suite=suite, table_name=table, success=outcome.success,
                            statistics=_jsonable(outcome.statistics), result=_jsonable(res.describe_dict()))
        s.add(row)
        s.flush()
        outcome.result_id = row.id
    engine.dispose()
    return outcome


def require(outcome: Outcome) -> None:
    """Print the summary into the task log; a failing expectation fails the task."""
    for line in outcome.lines:
        print(line, flush=True)
    stats = outcome.statistics
    print(f"{outcome.table}: {stats.get('successful_expectations')} of {stats.get('evaluated_expectations')} "
          f"expectations met (quality_results id {outcome.result_id})", flush=True)
    if not outcome.success:
        failed = [line for line in outcome.lines if line.startswith("FAIL")]
        raise QualityFailed(f"{outcome.table}: {len(failed)} expectation(s) failed: " + "; ".join(failed))


def _suite(name: str, reconcile_query: str, freshness: timedelta | None, now: datetime | None) -> list:
    import great_expectations.expectations as gxe

    if name != "orders":
        raise ValueError(f"suite {name!r} is not known")
    out: list = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in
                 ("topic", "partition", "offset", "event_id", "user_id", "event_type", "amount", "currency",
                  "event_time")]
    out += [
        gxe.UnexpectedRowsExpectation(
            description="(topic, partition, offset) is unique",
            unexpected_rows_query='SELECT topic, partition, "offset", count(*) AS copies FROM {batch} '
                                  'GROUP BY topic, partition, "offset" HAVING count(*) > 1'),
        gxe.UnexpectedRowsExpectation(
            description="event_id is unique",
            unexpected_rows_query="SELECT event_id, count(*) AS copies FROM {batch} GROUP BY event_id "
                                  "HAVING count(*) > 1"),
        gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=MAX_AMOUNT),
        gxe.ExpectColumnValuesToBeBetween(column="user_id", min_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="event_type", value_set=list(EVENT_TYPES)),
        gxe.ExpectColumnValuesToBeInSet(column="currency", value_set=list(CURRENCIES)),
        gxe.ExpectColumnValueLengthsToEqual(column="event_id", value=36),
        gxe.UnexpectedRowsExpectation(
            description="rows landed + dead letters = offsets consumed (offsets_db)",
            unexpected_rows_query=reconcile_query),
    ]
    if freshness is not None:
        oldest = (now or datetime.now(timezone.utc)) - freshness  # aware: the column is timestamptz
        out.append(gxe.ExpectColumnMaxToBeBetween(column="kafka_timestamp", min_value=oldest,
                                                  description=f"newest record at most {freshness} old"))
    return out


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))

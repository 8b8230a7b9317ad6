"""Great Expectations on sink tables, results stored in offsets_db.quality_results.

Every suite has the platform's checks: Kafka coordinates not null and (topic, partition, offset) unique;
reconciliation (rows landed plus dead letters equal the offsets the checked job consumed, from offsets_db; in an
upsert table a version replaced by a later one is accounted for, so rows landed plus dead letters are at most
the offsets consumed and every row comes from them); optionally freshness. The entry adds the expectations of
its own rules and its `quality:` list (`spark_jobs.pipelines.expectations`). Bounded runs check only their own
ranges; a stream's table is checked whole.

GX is imported inside `validate` (it pulls in pyspark, seconds): DAG files stay quick to parse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from streamfill.datasets import PgTable
from streamfill.errors import QualityFailed
from streamfill.offsets_db import reconcile
from streamfill.offsets_db.engine import make_engine
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs import lineage, pipelines
from streamfill.spark_jobs.lineage_events import Parent, assertions_facet, assertions_of, input_dataset, quality_job
from streamfill.spark_jobs.pipelines import expectations, registry

COORDINATES = ("topic", "partition", "offset")


@dataclass
class Outcome:
    success: bool
    table: str
    lines: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    result_id: int | None = None


def validate(db_url: str, table: str, job: str, *, pipeline: str, whole_table: bool = False,
             freshness: timedelta | None = None, now: datetime | None = None,
             schema_registry: Mapping[str, str] | None = None, parent: Parent | None = None) -> Outcome:
    """Run the entry `pipeline`'s suite on `table` for what `job` consumed; store and return the outcome (never
    raises on a failing expectation: `require` does). An entry whose columns come from a registry subject is
    checked against the columns of its latest version (`schema_registry`: the registry's client settings).
    With lineage configured, the check is an OpenLineage run `<job>.quality` reading the table, with the
    expectations' verdicts as its data-quality assertions; it FAILs when an expectation fails. `parent`: the
    launching run (default: OPENLINEAGE_PARENT_ID)."""
    parent = parent if parent is not None else Parent.parse(os.environ)
    checked = PgTable.of(db_url, table)
    with lineage.launch_run(quality_job(job), [checked], [], parent=parent) as run:
        outcome, results = _validate(db_url, table, job, pipeline, whole_table, freshness, now, schema_registry)
        if results is not None:
            run.inputs = [input_dataset(checked, assertions=assertions_facet(assertions_of(results)))]
        if not outcome.success:
            run.failed(f"{table}: expectations failed: "
                       + "; ".join(line for line in outcome.lines if line.startswith("FAIL"))[:2000])
    return outcome


def _validate(db_url: str, table: str, job: str, pipeline: str, whole_table: bool, freshness: timedelta | None,
              now: datetime | None, schema_registry: Mapping[str, str] | None) -> tuple[Outcome, list | None]:
    spec = registry.resolved(pipelines.entry(pipeline), schema_registry)
    suite = spec.name
    own = expectations.for_entry(spec)  # validated before anything is read
    # with a business key, a record may replace (replace) or be dropped for (append-new) an earlier one; without
    # dead letters, an invalid record is kept nowhere: then rows + dead letters may only fall short of the offsets
    upsert = any(k not in ("topic", "partition", "offset") for k in spec.key) or not spec.dead_letters
    engine = make_engine(db_url)
    try:
        OffsetStore(engine).check_grants()  # it records its verdict
        job_id, ranges = reconcile.consumed(engine, job)
        if not ranges:  # an hour without traffic: an empty window passes, and says so
            outcome = Outcome(True, table, [f"PASS job {job!r} consumed no offsets: nothing to check in {table}"],
                              {"evaluated_expectations": 0, "successful_expectations": 0})
            outcome.result_id = reconcile.record_result(engine, job_id, suite, table, True, outcome.statistics,
                                                        {"note": outcome.lines[0]})
            return outcome, None
        subset_q, reconcile_q = reconcile.checked_rows_and_reconciliation(engine, table, ranges, whole_table,
                                                                          job_id, upsert=upsert)
        res = _run(db_url, f"{suite}:{table}:{job}", subset_q,
                   _suite(own, reconcile_q, freshness, now, exact=not upsert))
        outcome = Outcome(bool(res.success), table, [_line(r) for r in res.results], dict(res.statistics))
        outcome.result_id = reconcile.record_result(engine, job_id, suite, table, outcome.success,
                                                    _jsonable(outcome.statistics), _jsonable(res.describe_dict()))
        return outcome, list(res.results)
    finally:
        engine.dispose()


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


def _run(db_url: str, name: str, query: str, expectations: list):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_or_update_postgres(name="streamfill", connection_string=db_url)
    batch = source.add_query_asset(name=name, query=query).add_batch_definition_whole_table("checked rows")
    suite = ctx.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
    definition = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    return definition.run(result_format="SUMMARY")


def _line(r) -> str:
    """One PASS or FAIL line per expectation, with what was unexpected."""
    cfg = r.expectation_config
    what = cfg.description or f"{cfg.type}({', '.join(f'{k}={v}' for k, v in cfg.kwargs.items() if k != 'batch_id')})"
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
    return f"{'PASS' if r.success else 'FAIL'} {what}{detail}"


def _suite(own: list, reconcile_query: str, freshness: timedelta | None, now: datetime | None,
           exact: bool = True) -> list:
    import great_expectations.expectations as gxe

    out: list = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in COORDINATES]
    out.append(gxe.UnexpectedRowsExpectation(
        description="(topic, partition, offset) is unique",
        unexpected_rows_query='SELECT topic, partition, "offset", count(*) AS copies FROM {batch} '
                              'GROUP BY topic, partition, "offset" HAVING count(*) > 1'))
    out += own
    out.append(gxe.UnexpectedRowsExpectation(
        description=f"rows landed + dead letters {'=' if exact else '<='} offsets consumed (offsets_db)",
        unexpected_rows_query=reconcile_query))
    if freshness is not None:
        oldest = (now or datetime.now(timezone.utc)) - freshness  # aware: the column is timestamptz
        out.append(gxe.ExpectColumnMaxToBeBetween(column="kafka_timestamp", min_value=oldest,
                                                  description=f"newest record at most {freshness} old"))
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))

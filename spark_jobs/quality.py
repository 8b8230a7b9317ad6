"""Great Expectations on sink tables, results stored in offsets_db.quality_results.

Every suite has the platform's checks: Kafka coordinates not null and (topic, partition, offset) unique;
reconciliation (rows landed plus dead letters equal the offsets the checked job consumed, from offsets_db; in an
upsert table a version replaced by a later one is accounted for, so rows landed plus dead letters are at most
the offsets consumed and every row comes from them); optionally freshness. The entry adds the expectations of
its own rules and its `quality:` list (`spark_jobs.pipelines.expectations`). Bounded runs check only their own
ranges; a stream's table is checked whole. A routed entry's tables are each checked with their own columns,
rules and key, one result each, and the rows of all of them count in the reconciliation.

GX is imported inside `validate` (it pulls in pyspark, seconds): DAG files stay quick to parse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from streamfill.datasets import PgTable
from streamfill.errors import OptionError, QualityFailed
from streamfill.offsets_db import reconcile
from streamfill.offsets_db.engine import make_engine
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs import lineage, pipelines
from streamfill.spark_jobs.lineage_events import Parent, assertions_facet, assertions_of, input_dataset, quality_job
from streamfill.spark_jobs.pipelines import PipelineSpec, expectations, registry
from streamfill.spark_jobs.pipelines.routes import RouteTable

COORDINATES = ("topic", "partition", "offset")


@dataclass
class Outcome:
    """The suite's verdict on one table; with several (a routed entry's tables), on all of them, `tables` holding
    each one's (a single table's outcome is its own only part)."""

    success: bool
    table: str
    lines: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    result_id: int | None = None  # its quality_results row; of several tables, the first's
    tables: list[Outcome] = field(default_factory=list)

    @classmethod
    def of(cls, parts: list[Outcome]) -> Outcome:
        if len(parts) == 1:
            return replace(parts[0], tables=list(parts))
        counted = ("evaluated_expectations", "successful_expectations")
        return cls(all(p.success for p in parts), ", ".join(p.table for p in parts),
                   [line for p in parts for line in p.lines],
                   {k: sum(p.statistics.get(k) or 0 for p in parts) for k in counted}, parts[0].result_id, parts)


def validate(db_url: str, table: str | None, job: str, *, pipeline: str, whole_table: bool = False,
             freshness: timedelta | None = None, now: datetime | None = None,
             schema_registry: Mapping[str, str] | None = None, parent: Parent | None = None) -> Outcome:
    """Run the entry `pipeline`'s suite on `table` (None: the entry's table, or each table of a routed entry) for
    what `job` consumed; store and return the outcome, one quality_results row per table (never raises on a
    failing expectation: `require` does). An entry whose columns come from a registry subject is checked against
    the columns of its latest version (`schema_registry`: the registry's client settings). With lineage
    configured, the check is an OpenLineage run `<job>.quality` reading the tables, with the expectations'
    verdicts as their data-quality assertions; it FAILs when an expectation fails. `parent`: the launching run
    (default: OPENLINEAGE_PARENT_ID)."""
    parent = parent if parent is not None else Parent.parse(os.environ)
    checked = {name: PgTable.of(db_url, name) for name, _ in checked_tables(pipelines.entry(pipeline), table)}
    with lineage.launch_run(quality_job(job), list(checked.values()), [], parent=parent) as run:
        outcome, results = _validate(db_url, table, job, pipeline, whole_table, freshness, now, schema_registry)
        if results:
            run.inputs = [input_dataset(t, assertions=assertions_facet(assertions_of(results[name])))
                          if name in results else input_dataset(t) for name, t in checked.items()]
        if not outcome.success:
            run.failed(f"{outcome.table}: expectations failed: "
                       + "; ".join(line for line in outcome.lines if line.startswith("FAIL"))[:2000])
    return outcome


def checked_tables(spec: PipelineSpec, table: str | None) -> list[tuple[str, RouteTable | None]]:
    """The tables a check covers, each with the route table whose columns, rules and key it has (None: the
    entry's own): `table` alone (a table of the entry's, or any other checked by the entry's rules), else the
    entry's table, or each table of a routed entry once."""
    once: dict[str, RouteTable] = {}
    for t in spec.route_tables():  # two route values may share a table (of one definition)
        once.setdefault(t.table, t)
    routed = list(once.values())
    if not routed:
        return [(table or spec.table, None)]
    if table is None:
        return [(t.table, t) for t in routed]
    chosen = next((t for t in routed if t.table == table), None)
    if chosen is None:
        raise OptionError("table", table, f"is not one of the tables of the routed job {spec.name!r} "
                          f"({', '.join(t.table for t in routed)}), whose rules differ by table",
                          "name one of them, or none to check them all")
    return [(table, chosen)]


def _validate(db_url: str, table: str | None, job: str, pipeline: str, whole_table: bool,
              freshness: timedelta | None, now: datetime | None,
              schema_registry: Mapping[str, str] | None) -> tuple[Outcome, dict[str, list] | None]:
    spec = registry.resolved(pipelines.entry(pipeline), schema_registry)
    suite = spec.name
    tables = checked_tables(spec, table)
    own = {name: expectations.for_entry(spec, routed) for name, routed in tables}  # validated before any read
    # every table a record of the entry may land in: a routed entry's rows are counted across all of them
    landing = [t.table for t in spec.route_tables()] or [tables[0][0]]
    keys = [t.key for t in spec.route_tables()] or [spec.key]
    # with a business key, a record may replace (replace) or be dropped for (append-new) an earlier one; without
    # dead letters, an invalid record is kept nowhere: then rows + dead letters may only fall short of the offsets
    upsert = any(k not in COORDINATES for key in keys for k in key) or not spec.dead_letters
    labelled = len(tables) > 1
    engine = make_engine(db_url)
    try:
        OffsetStore(engine).check_grants()  # it records its verdict
        job_id, ranges = reconcile.consumed(engine, job)
        parts, results = [], {}
        for name, _ in tables:
            if not ranges:  # an hour without traffic: an empty window passes, and says so
                part = Outcome(True, name, [_labelled(f"PASS job {job!r} consumed no offsets: nothing to check in "
                                                      f"{name}", name, labelled)],
                               {"evaluated_expectations": 0, "successful_expectations": 0})
                part.result_id = reconcile.record_result(engine, job_id, suite, name, True, part.statistics,
                                                         {"note": part.lines[0]})
                parts.append(part)
                continue
            others = list(dict.fromkeys(t for t in landing if t != name))
            subset_q, reconcile_q = reconcile.checked_rows_and_reconciliation(
                engine, name, ranges, whole_table, job_id, upsert=upsert, other_tables=others)
            res = _run(db_url, f"{suite}:{name}:{job}", subset_q,
                       _suite(own[name], reconcile_q, freshness, now, exact=not upsert, tables=[name, *others]))
            part = Outcome(bool(res.success), name, [_labelled(_line(r), name, labelled) for r in res.results],
                           dict(res.statistics))
            part.result_id = reconcile.record_result(engine, job_id, suite, name, part.success,
                                                     _jsonable(part.statistics), _jsonable(res.describe_dict()))
            parts.append(part)
            results[name] = list(res.results)
        return Outcome.of(parts), results or None
    finally:
        engine.dispose()


def _labelled(line: str, table: str, labelled: bool) -> str:
    """`PASS what` as `PASS table: what` when a check covers several tables."""
    if not labelled:
        return line
    verdict, _, what = line.partition(" ")
    return f"{verdict} {table}: {what}"


def require(outcome: Outcome) -> None:
    """Print the summary into the task log; a failing expectation fails the task."""
    for line in outcome.lines:
        print(line, flush=True)
    for part in outcome.tables or [outcome]:
        stats = part.statistics
        print(f"{part.table}: {stats.get('successful_expectations')} of {stats.get('evaluated_expectations')} "
              f"expectations met (quality_results id {part.result_id})", flush=True)
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
           exact: bool = True, tables: list[str] | None = None) -> list:
    """The platform's checks around the entry's `own`; `tables`: those the reconciliation counts rows of, named
    when they are several."""
    import great_expectations.expectations as gxe

    out: list = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in COORDINATES]
    out.append(gxe.UnexpectedRowsExpectation(
        description="(topic, partition, offset) is unique",
        unexpected_rows_query='SELECT topic, partition, "offset", count(*) AS copies FROM {batch} '
                              'GROUP BY topic, partition, "offset" HAVING count(*) > 1'))
    out += own
    out.append(gxe.UnexpectedRowsExpectation(
        description=f"rows landed{' in ' + ' + '.join(tables) if tables and len(tables) > 1 else ''} + dead letters "
                    f"{'=' if exact else '<='} offsets consumed (offsets_db)",
        unexpected_rows_query=reconcile_query))
    if freshness is not None:
        oldest = (now or datetime.now(timezone.utc)) - freshness  # aware: the column is timestamptz
        out.append(gxe.ExpectColumnMaxToBeBetween(column="kafka_timestamp", min_value=oldest,
                                                  description=f"newest record at most {freshness} old"))
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))

"""The operator of an entry's quality suite (spark_jobs/quality.py) on a table, for what one job consumed: its
rules, its `quality:` list, reconciliation against offsets_db and, optionally, freshness. The verdict is stored
in quality_results; a failing expectation fails the task."""

from __future__ import annotations

from datetime import timedelta

from streamfill import extras
from streamfill.orchestration.endpoints import Endpoints
from streamfill.orchestration.entry_operator import EntryOperator
from streamfill.orchestration.failures import classed
from streamfill.spark_jobs.pipelines import PipelineSpec


class StreamfillQualityOperator(EntryOperator):
    """`entry`'s suite on `table` (default: the entry's; a routed entry's: each of its tables, by its own rules)
    for what `job` consumed (default: the entry's stream;
    templated, e.g. a backfill operator's output). `whole_table`: check every row, not only the job's ranges;
    `fresh_minutes`: the newest record at most that old."""

    template_fields = (*EntryOperator.template_fields, "job", "table")

    def __init__(self, *, entry: str, job: str | None = None, table: str | None = None, whole_table: bool = False,
                 fresh_minutes: int | None = None, **kwargs) -> None:
        super().__init__(entry=entry, **kwargs)
        self.job, self.table, self.whole_table, self.fresh_minutes = job, table, whole_table, fresh_minutes

    def execute(self, context) -> None:
        with classed():
            spec = self.entry_spec()
            check_quality(spec, self.endpoints(spec), self.job or spec.name, self.table or None,
                          self.whole_table, self.fresh_minutes)


def check_quality(spec: PipelineSpec, ends: Endpoints, job: str, table: str | None, whole_table: bool = False,
                  fresh_minutes: int | None = None) -> None:
    """Run, store and print the suite on `table` (None: the entry's, each of a routed entry's tables);
    QualityFailed when an expectation fails."""
    extras.require(extras.QUALITY, "an entry's quality suite (the worker runs Great Expectations)")
    from streamfill.orchestration.task_lineage import lineage_parent
    from streamfill.spark_jobs import quality as q

    outcome = q.validate(ends.db_url, table, job, pipeline=spec.name, whole_table=whole_table,
                         freshness=timedelta(minutes=fresh_minutes) if fresh_minutes else None,
                         schema_registry=ends.schema_registry or None, parent=lineage_parent())
    q.require(outcome)

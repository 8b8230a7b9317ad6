"""streamfill's OpenLineage events, built from what a run knows: the job, its run id, the topic it reads, the
table it writes with the columns the sink creates, Great Expectations' verdicts and the Airflow task that launched
it. Spark's own OpenLineage listener sees neither the Python data source nor rows written by COPY, so streamfill
says it itself. Pure: nothing here reads the environment, the clock aside, or sends anything (`spark_jobs.lineage`
does).

Names: a dataset's namespace and name come from `streamfill.datasets` only; a job's namespace is the setting
STREAMFILL_LINEAGE_NAMESPACE (default "streamfill"), its name the streamfill job's (`<job>.quality` for its checks).
"""

from __future__ import annotations

import importlib.metadata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

import attr
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq
from openlineage.client.facet_v2 import (
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
)
from openlineage.client.uuid import generate_static_uuid

from streamfill.changes import SOURCE_POSITION, SOURCE_POSITION_TYPE
from streamfill.errors import OptionError
from streamfill.spark_jobs.pipelines.columns import COORDINATE_TYPES
from streamfill.spark_jobs.pipelines.spec import PipelineSpec
from streamfill.spark_jobs.pipelines.types import parse_type


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "0"


VERSION, ADAPTER_VERSION = _version("streamfill"), _version("openlineage-python")
PRODUCER = f"https://github.com/streamfill/streamfill/tree/{VERSION}"
INTEGRATION = "STREAMFILL"  # jobType's integration, as Airflow's provider says AIRFLOW and Spark's listener SPARK
NAMESPACE_SETTING, DEFAULT_NAMESPACE = "STREAMFILL_LINEAGE_NAMESPACE", "streamfill"
# the names Airflow's OpenLineage provider (lineage_parent_id) and OpenLineage's integrations read a parent run from
PARENT_ID, ROOT_PARENT_ID = "OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID"
# Spark's Kafka schema (connectors/spark/source.py SCHEMA) in the entry's type names, so the sink's types of the
# coordinates come from spark_jobs.pipelines.types like every declared column's
Assertion = tuple[str, str | None, bool] | tuple[str, str | None, bool, str | None]


class Named(Protocol):
    """A dataset as `streamfill.datasets` names it (PgTable, KafkaTopic)."""

    @property
    def lineage_namespace(self) -> str: ...

    @property
    def lineage_name(self) -> str: ...


def quality_job(job: str) -> str:
    """The quality checks of `job` are a job of their own, beside it in the graph."""
    return f"{job}.quality"


@dataclass(frozen=True)
class Parent:
    """The run that launched this one (an Airflow task) and the root of that chain (its DAG run)."""

    namespace: str
    job_name: str
    run_id: str
    root_namespace: str
    root_name: str
    root_run_id: str

    @classmethod
    def parse(cls, environ: Mapping[str, str]) -> Parent | None:
        """OPENLINEAGE_PARENT_ID and OPENLINEAGE_ROOT_PARENT_ID (`namespace/job_name/run_id` each); None when
        neither is set. Without a root, the parent is its own root, as OpenLineage's integrations take it."""
        given, root = environ.get(PARENT_ID, "").strip(), environ.get(ROOT_PARENT_ID, "").strip()
        if not given:
            if root:
                raise OptionError(ROOT_PARENT_ID, root, f"is set without {PARENT_ID}",
                                  f"set {PARENT_ID} too (the launching task's namespace/job_name/run_id) or unset "
                                  "both")
            return None
        namespace, name, run_id = _triple(PARENT_ID, given)
        return cls(namespace, name, run_id, *(_triple(ROOT_PARENT_ID, root) if root else (namespace, name, run_id)))

    def environ(self) -> dict[str, str]:
        """The settings that hand this parent to a child process (spark-submit's environment)."""
        return {PARENT_ID: f"{self.namespace}/{self.job_name}/{self.run_id}",
                ROOT_PARENT_ID: f"{self.root_namespace}/{self.root_name}/{self.root_run_id}"}

    def facet(self) -> parent_run.ParentRunFacet:
        return parent_run.ParentRunFacet(
            run=parent_run.Run(runId=self.run_id), job=parent_run.Job(namespace=self.namespace, name=self.job_name),
            root=parent_run.Root(run=parent_run.RootRun(runId=self.root_run_id),
                                 job=parent_run.RootJob(namespace=self.root_namespace, name=self.root_name)),
            producer=PRODUCER)


def _triple(option: str, raw: str) -> tuple[str, str, str]:
    parts = raw.rsplit("/", 2)  # a namespace may hold a slash, a job name and a run id do not
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise OptionError(option, raw, "is not namespace/job_name/run_id",
                          "e.g. default/my_dag.my_task/01900000-0000-7000-8000-000000000000; Airflow gives it as "
                          "{{ macros.OpenLineageProviderPlugin.lineage_parent_id(task_instance) }}")
    try:
        run_id = str(uuid.UUID(parts[2]))
    except ValueError:
        raise OptionError(option, raw, f"ends in {parts[2]!r}, which is not a run id (a UUID)",
                          "give the run id the parent's own events carry") from None
    return parts[0], parts[1], run_id


def airflow_task_run_id(namespace: str, dag_id: str, task_id: str, try_number: int, map_index: int,
                        logical_date: datetime) -> str:
    """The run id Airflow's OpenLineage provider gives a task instance (2.20.3, build_task_instance_ol_run_id):
    `logical_date` is the DAG run's logical date, or its run_after when it has none (partitioned runs)."""
    return str(generate_static_uuid(instant=_aware(logical_date),
                                    data=f"{namespace}.{dag_id}.{task_id}.{try_number}.{map_index}".encode()))


def airflow_dag_run_id(namespace: str, dag_id: str, clear_number: int, logical_date: datetime) -> str:
    """The run id Airflow's OpenLineage provider gives a DAG run (2.20.3, build_dag_run_ol_run_id)."""
    return str(generate_static_uuid(instant=_aware(logical_date), data=f"{namespace}.{dag_id}.{clear_number}".encode()))


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:  # a naive time is local or UTC only by guess (and would give another run id, silently)
        raise ValueError(f"{when!r} has no time zone; give an aware datetime (Airflow's dates are)")
    return when


def schema_facet(spec: PipelineSpec, other_types: Mapping[str, str] | None = None) -> schema_dataset.SchemaDatasetFacet:
    """The table's columns as the sink creates them: the coordinates and every declared column with its
    PostgreSQL type (spark_jobs.pipelines.types, the types the sink is given as columnTypes). Derived and raw
    columns take their type from `other_types` (e.g. the written DataFrame through connectors.spark.pg_types)
    and are listed without one otherwise."""
    known = {name: parse_type(t).postgres for name, t in COORDINATE_TYPES.items()}
    known[SOURCE_POSITION] = parse_type(SOURCE_POSITION_TYPE).postgres
    known.update({name: c.column_type.postgres for name, c in spec.all_columns.items()})
    known.update(other_types or {})
    return schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=name, type=known.get(name))
                for name in spec.table_columns()],
        producer=PRODUCER)


def assertions_facet(results: Iterable[Assertion]) -> dq.DataQualityAssertionsDatasetFacet:
    """One assertion per expectation: (expectation type, column or None, success[, description]). An input
    facet: it goes on the checked table as the quality run's input."""
    return dq.DataQualityAssertionsDatasetFacet(
        assertions=[dq.Assertion(assertion=r[0], column=r[1], success=bool(r[2]),
                                 description=r[3] if len(r) > 3 else None) for r in results],
        producer=PRODUCER)


def assertions_of(gx_results: Iterable) -> list[Assertion]:
    """Great Expectations' validation results (`res.results`) as assertions_facet's input."""
    out: list[Assertion] = []
    for r in gx_results:
        cfg = r.expectation_config
        out.append((cfg.type, (cfg.kwargs or {}).get("column"), bool(r.success), cfg.description))
    return out


def input_dataset(ds: Named, *, schema: schema_dataset.SchemaDatasetFacet | None = None,
                  assertions: dq.DataQualityAssertionsDatasetFacet | None = None) -> InputDataset:
    return InputDataset(namespace=ds.lineage_namespace, name=ds.lineage_name,
                        facets={"schema": schema} if schema else None,
                        inputFacets={"dataQualityAssertions": assertions} if assertions else None)


def output_dataset(ds: Named, *, schema: schema_dataset.SchemaDatasetFacet | None = None,
                   rows: int | None = None) -> OutputDataset:
    return OutputDataset(namespace=ds.lineage_namespace, name=ds.lineage_name,
                         facets={"schema": schema} if schema else None,
                         outputFacets={"outputStatistics": _rows(rows)} if rows is not None else None)


def _rows(rows: int) -> output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet:
    return output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=int(rows), producer=PRODUCER)


def run_event(state: RunState | str, job_name: str, run_id: str, inputs: Sequence[InputDataset | Named],
              outputs: Sequence[OutputDataset | Named], *, namespace: str, parent: Parent | None = None,
              error: str | None = None, when: datetime | None = None, output_rows: int | None = None,
              processing: str = "BATCH") -> RunEvent:
    """One event of a run: START, RUNNING (a stream's commit: `output_rows` are its rows), COMPLETE, FAIL
    (`error`: the cause's first lines), ABORT. `output_rows` goes on the first output, the target table;
    `processing` is BATCH or STREAMING."""
    state = RunState(state)
    ins = [d if isinstance(d, InputDataset) else input_dataset(d) for d in inputs]
    outs = [d if isinstance(d, OutputDataset) else output_dataset(d) for d in outputs]
    if output_rows is not None and outs:
        outs[0] = attr.evolve(outs[0], outputFacets={**(outs[0].outputFacets or {}),
                                                     "outputStatistics": _rows(output_rows)})
    facets: dict = {"processing_engine": processing_engine_run.ProcessingEngineRunFacet(
        version=VERSION, name="streamfill", openlineageAdapterVersion=ADAPTER_VERSION,
        producer=PRODUCER)}
    if parent is not None:
        facets["parent"] = parent.facet()
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python", producer=PRODUCER)
    job_type = job_type_job.JobTypeJobFacet(processingType=processing, integration=INTEGRATION, jobType="JOB",
                                            producer=PRODUCER)
    moment = _aware(when) if when is not None else datetime.now(timezone.utc)
    return RunEvent(eventType=state, eventTime=moment.isoformat(), run=Run(runId=str(run_id), facets=facets),
                    job=Job(namespace=namespace, name=job_name, facets={"jobType": job_type}),
                    producer=PRODUCER, inputs=ins, outputs=outs)

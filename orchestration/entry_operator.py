"""What the streamfill operators share: the jobs file's entry they run and the Airflow connections they read
(each operator's `*_conn_id` parameters, else the entry's, else the defaults: orchestration/endpoints.py)."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import BaseOperator

from streamfill.orchestration.endpoints import ConnIds, Endpoints, endpoints
from streamfill.spark_jobs.pipelines import PipelineSpec


class EntryOperator(BaseOperator):
    """An operator running a launch of the jobs file's entry `entry` (templated) on its connections.

    The YAML DAG factory hands over the entry it built the task from (`spec`); a DAG written by hand names the
    entry, read from the jobs file when the task runs (the Airflow Variable streamfill_jobs_file, else
    STREAMFILL_JOBS_FILE, else the checkout's)."""

    template_fields: tuple[str, ...] = ("entry",)

    def __init__(self, *, entry: str, kafka_conn_id: str | None = None, postgres_conn_id: str | None = None,
                 schema_registry_conn_id: str | None = None, spark_conn_id: str | None = None,
                 spec: PipelineSpec | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.entry, self.spec = entry, spec
        self.kafka_conn_id, self.postgres_conn_id = kafka_conn_id, postgres_conn_id
        self.schema_registry_conn_id, self.spark_conn_id = schema_registry_conn_id, spark_conn_id
        self.jobs_file: Path | None = None  # the file entry_spec pinned

    def entry_spec(self) -> PipelineSpec:
        """The entry this task runs; the jobs file it comes from (`jobs_file`) is the one the jobs it launches
        read, and the one a detached stream's supervision watches."""
        from streamfill.orchestration.jobs_file_variable import pin
        from streamfill.spark_jobs import pipelines

        self.jobs_file = pin()
        if self.spec is not None and self.spec.name == self.entry:
            return self.spec
        return pipelines.entry(self.entry, "entry")

    def conn_ids(self, spec: PipelineSpec) -> ConnIds:
        return ConnIds.of(spec, kafka=self.kafka_conn_id, postgres=self.postgres_conn_id,
                          schema_registry=self.schema_registry_conn_id, spark=self.spark_conn_id)

    def endpoints(self, spec: PipelineSpec) -> Endpoints:
        return endpoints(self.conn_ids(spec))

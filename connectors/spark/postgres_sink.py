"""`streamfill_postgres`, the exactly-once Postgres sink for df.write and writeStream: Spark's data source and its
writers. Tasks stage their rows under write ids of their own; the driver's commit moves into the target exactly
the staged rows its messages name, in the one transaction that also commits the batch's offsets, so rows of
failed task attempts never land and a replayed batch moves nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from streamfill.connectors.spark.postgres_commit import abort, commit
from streamfill.connectors.spark.postgres_plan import SinkPlan, plan_write
from streamfill.connectors.spark.postgres_staging import StagedWrite, stage_write


class PostgresSink(DataSource):
    """.format("streamfill_postgres").option("table", ...) with job, mode, keyColumns and url."""

    @classmethod
    def name(cls) -> str:
        return "streamfill_postgres"

    def writer(self, schema: StructType, overwrite: bool) -> PostgresBatchWriter:
        return PostgresBatchWriter(plan_write(self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> PostgresStreamWriter:
        return PostgresStreamWriter(plan_write(self.options, schema, overwrite, streaming=True))


class PostgresBatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        return stage_write(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit(self.plan, messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort(self.plan, messages)


class PostgresStreamWriter(PostgresBatchWriter, DataSourceStreamArrowWriter):
    """A batch writer whose commit and abort take Spark's micro-batch id too."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit(self.plan, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort(self.plan, messages)

"""The thin PySpark layer over the connector core."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `streamfill_kafka` and `streamfill_postgres` available to this session's readers and writers."""
    from connectors.spark.postgres_sink import PostgresSink
    from connectors.spark.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(PostgresSink)

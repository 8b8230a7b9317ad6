"""The thin PySpark layer over the connector core."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `streamfill_kafka` available to spark.read and spark.readStream in this session."""
    from connectors.spark.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)

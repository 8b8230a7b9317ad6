"""An entry's read of Kafka through `streamfill_kafka` for a launch of its job, batch or streaming alike, and the
entry's parse of what it reads."""

from __future__ import annotations

from collections.abc import Mapping

from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.spark_jobs.pipelines import PipelineSpec


def kafka_options(kafka: Mapping[str, str]) -> dict[str, str]:
    """The cluster's client settings as the data sources' `kafka.*` options. A plan's text shows their values
    except those spark.redaction.regex and the session's spark.sql.redaction.options.regex name."""
    return {f"{kafka_source.KAFKA_PROPERTIES.prefix}{key}": value for key, value in kafka.items()}


def kafka_reader(reader, spec: PipelineSpec, job: str, kafka: Mapping[str, str], url: str,
                 generation: int | None = None):
    """`reader` (`spark.read` or `spark.readStream`) on `streamfill_kafka` for `job`: the cluster's settings, the
    entry's headers and the values the read types itself (typed_in_read.reader_options), offsets_db at `url`, and the
    launch's hold on the job (`generation`) when it has one. The caller adds what to read."""
    from streamfill.spark_jobs.pipelines.typed_in_read import reader_options

    reader = (reader.format("streamfill_kafka")
              .options(**kafka_options(kafka))
              .option(kafka_source.INCLUDE_HEADERS.key, str(spec.format == "raw").lower())
              .option(kafka_source.JOB.key, job).option(kafka_source.OFFSETS_DB_URL.key, url)
              .options(**reader_options(spec)))
    return reader if generation is None else reader.option(kafka_source.JOB_GENERATION.key, str(generation))


def rows_of(spec: PipelineSpec, kafka):
    """The entry's parse; without dead letters, invalid records are left out of the table (and counted nowhere)."""
    from pyspark.sql import functions as F

    from streamfill.spark_jobs.pipelines.compile import parse

    rows = parse(kafka, spec)
    return rows if spec.dead_letters else rows.where(F.col("_error").isNull()).drop("_error", "_raw")

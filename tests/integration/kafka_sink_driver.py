"""Writes ROWS records into TOPIC with streamfill_kafka in two tasks, in batches of 1,000 rows.

python kafka_sink_driver.py TOPIC ROWS TRANSACTIONAL
Tests arm the `kafka_sink.batch_sent` failpoint so one task attempt dies midway, and run it with
STREAMFILL_SPARK_MASTER=local[2,3] so Spark retries that task (plain local mode allows no retry).
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

from streamfill.connectors.spark import register
from streamfill.settings import Settings
from streamfill.spark_jobs.session import spark_session


def main(topic: str, rows: str, transactional: str) -> None:
    settings = Settings()
    spark = spark_session("kafka-sink-retry", settings, {"spark.ui.enabled": "false",
                                                         "spark.ui.showConsoleProgress": "false",
                                                         "spark.sql.execution.arrow.maxRecordsPerBatch": "1000"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    (spark.range(0, int(rows), numPartitions=2)
     .select(F.col("id").cast("string").alias("key"), F.format_string('{"n": %d}', "id").alias("value"))
     .write.format("streamfill_kafka").mode("append")
     .option("kafka.bootstrap.servers", settings.bootstrap_servers).option("topic", topic)
     .option("transactional", transactional).save())
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

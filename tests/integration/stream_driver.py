"""A stream from streamfill_kafka into streamfill_postgres, run as its own process so tests can SIGKILL it.

python stream_driver.py TOPIC JOB TABLE CHECKPOINT [MAX_OFFSETS_PER_TRIGGER]
DRIVER_SOURCE_OPTIONS (JSON) adds source options, e.g. {"failOnDataLoss": "false"}.
Runs with Trigger.AvailableNow and exits 0 when everything available has been written. Each row gets a random
`row_id`, the table's unique key, so a record written twice shows up twice (the key cannot hide it). With
DRIVER_DEFAULT_KEY=1 the table keeps the default key (topic, partition, offset).
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql.functions import expr

from streamfill.connectors.spark import register
from streamfill.settings import Settings
from streamfill.spark_jobs.session import spark_session


def main(topic: str, job: str, table: str, checkpoint: str, max_per_trigger: str = "200") -> None:
    os.environ["STREAMFILL_FAILPOINT_PGID"] = str(os.getpgrp())
    settings = Settings()
    spark = spark_session(f"driver-{job}", settings, {"spark.ui.enabled": "false",
                                                      "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("streamfill_kafka")
          .option("kafka.bootstrap.servers", settings.bootstrap_servers)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", max_per_trigger).option("job", job)
          .options(**json.loads(os.environ.get("DRIVER_SOURCE_OPTIONS", "{}"))).load())
    key = {} if os.environ.get("DRIVER_DEFAULT_KEY") == "1" else {"keyColumns": "row_id"}
    if key:
        df = df.withColumn("row_id", expr("uuid()"))
    query = (df.writeStream.format("streamfill_postgres").option("table", table).option("job", job).options(**key)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

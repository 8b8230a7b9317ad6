"""The one way streamfill builds a SparkSession: the project's interpreter on every worker, any master."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_jobs import class_archive
from streamfill import failpoints
from streamfill.settings import Settings, get_settings


REDACTED_OPTIONS = r"(?i)url|sasl\.jaas\.config|ssl\.key\.pem|ssl\.keystore\.key"


def spark_session(app_name: str, settings: Settings | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A session on settings.spark_master whose Python workers run this interpreter (not `python3` on PATH)."""
    settings = settings or get_settings()
    failpoints.pin_group()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", settings.host)
    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --master decides
        builder = builder.master(settings.spark_master)
        os.environ.update(class_archive.with_archive(dict(os.environ), settings.home))  # the JVM starts here
    builder = (builder.appName(app_name)
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               # HotSpot never compiles a method over 8,000 bytes of bytecode, and a pipeline's projections of
               # values typed in the read (each column: the read's value, or from_json's and its checks) make one:
               # Spark's default (65535) kept it as one method the JVM then interpreted. Reading 2,000,000 demo
               # events typed in the read, parsing and handing them to Python took 12.7 s instead of 16.9
               # (medians of two, one session); with Spark's parse alone 18.9 s and 19.2 s.
               # Spark's docs advise 8000 on HotSpot: such a stage then runs without whole-stage codegen.
               .config("spark.sql.codegen.hugeMethodLimit", "8000")
               # options whose values Spark hides in plans, beside spark.redaction.regex's passwords and secrets:
               # URLs (offsetsDbUrl carries offsets_db's password) and the Kafka secrets not named like one
               .config("spark.sql.redaction.options.regex", REDACTED_OPTIONS))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session

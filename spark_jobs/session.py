"""The one way streamfill builds a SparkSession: the project's interpreter on every worker, any master. On a
cluster master the project's packages go with the job (spark_jobs/py_files.py), for workers without streamfill."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from streamfill import failpoints, requirements
from streamfill.console import console
from streamfill.kafka_client import describe
from streamfill.settings import Settings, get_settings
from streamfill.spark_jobs import class_archive, py_files

REDACTED_OPTIONS = r"(?i)url|sasl\.jaas\.config|ssl\.key\.pem|ssl\.keystore\.key"
# every job's session, local or a Spark Connect server's
SESSION_SETTINGS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # HotSpot never compiles a method over 8,000 bytes of bytecode, and a pipeline's projections of values typed in
    # the read (each column: the read's value, or from_json's and its checks) make one; with this limit, as Spark's
    # docs advise on HotSpot, such a stage runs without whole-stage codegen instead of as one method the JVM only
    # interprets
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # options whose values Spark hides in plans, beside spark.redaction.regex's passwords and secrets: URLs
    # (offsetsDbUrl carries offsets_db's password) and the Kafka secrets not named like one
    "spark.sql.redaction.options.regex": REDACTED_OPTIONS,
}


def spark_session(app_name: str, settings: Settings | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A session on settings.spark_master whose Python workers run this interpreter (not `python3` on PATH), or
    the one spark.pyspark.python or PYSPARK_PYTHON names: a cluster's workers may keep theirs elsewhere."""
    settings = settings or get_settings()
    failpoints.pin_group()
    # PySpark takes the workers' interpreter from this variable alone, as the session starts
    os.environ["PYSPARK_PYTHON"] = ((conf or {}).get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
                                    or sys.executable)
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", settings.host)
    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --master decides
        requirements.check_java()  # the JVM starts here: refuse an old Java in words, not a class-version error
        builder = builder.master(settings.spark_master)
        os.environ.update(class_archive.with_archive(dict(os.environ), settings.home))  # the JVM starts here
    builder = builder.appName(app_name)
    for key, value in SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    requirements.spark(session.version)
    session.sparkContext.setLogLevel("WARN")
    _ship_code(session, settings)
    return session


def connect_session(remote: str, session_id: str) -> SparkSession:
    """A session of this process on the Spark Connect server `remote` (sc://host:port), under `session_id`: a
    detached stream's launch starts its query in it and leaves, and a later process names the same id to find the
    query again. The server runs the driver, so nothing of this process's (its interpreter, a class archive) goes
    with it; the session's settings are every job's."""
    session = SparkSession.builder.remote(f"{remote.rstrip('/')}/;session_id={session_id}").getOrCreate()
    for key, value in SESSION_SETTINGS.items():
        session.conf.set(key, value)
    return session


def job_session(app_name: str, master: str | None = None, settings: Settings | None = None) -> SparkSession:
    """The session of a job's launch, on `master` when given (spark-submit's --master), without the console
    progress bar Spark would draw over the job's own lines."""
    settings = settings or get_settings()
    if master:
        settings = settings.model_copy(update={"spark_master": master})
    return spark_session(app_name, settings, {"spark.ui.showConsoleProgress": "false"})


def say_where(spark: SparkSession, settings: Settings) -> None:
    """The launch's first lines: the cluster it reads (no secret) and its Spark UI."""
    console.print(f"Kafka: {describe(settings.kafka_client())}", highlight=False)
    if spark.sparkContext.uiWebUrl:
        console.print(f"Spark UI: {spark.sparkContext.uiWebUrl}", highlight=False)


def _ship_code(session: SparkSession, settings: Settings) -> None:
    """On a cluster master, the project's packages to the executors, unless the launch shipped them (a driver
    under spark-submit --py-files imports them from there). Only the executors use the archive: PySpark also
    puts it on this process's sys.path, ahead of the installed project, and it comes off again."""
    context = session.sparkContext
    if not py_files.ships(context.master) or py_files.from_archive():
        return
    path = py_files.archive(settings.home)
    shipped = [*context.getConf().get("spark.submit.pyFiles", "").split(","), *context.listFiles]
    if path.name in {Path(p).name for p in shipped if p}:  # a session made again on the same context
        return
    before = list(sys.path)
    context.addPyFile(str(path))
    sys.path[:] = before

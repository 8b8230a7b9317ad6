"""The spark-submit command of a job launched from Airflow, written by the apache-spark provider's SparkSubmitHook
from its connection (master, deploy mode, queue, spark binary: the connection `spark_conn_id`, or the Variable
streamfill_spark_master's master when none is named) and the entry's `spark:` settings (conf, executor memory and
cores, driver memory, executors, packages). orchestration/spark_submit.py runs it.

The provider is installed without its dependencies (`make install`): it requires pyspark-client, Spark Connect's
client alone, which installs into the same `pyspark` package as PySpark and leaves no local mode.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from streamfill.errors import OptionError
from streamfill.spark_jobs.pipelines.nested_specs import SparkSpec

PROVIDER = "apache-airflow-providers-apache-spark"
INSTALL_PROVIDER = (f"install it without its dependencies: pip install --no-deps {PROVIDER} (its pyspark-client "
                    "would replace PySpark's local mode); docs/infrastructure.md")
VARIABLE_MASTER_CONN = "streamfill_spark_master"  # the stand-in connection of the Variable's master


@dataclass(frozen=True)
class SparkCommand:
    """What is run, and where its driver runs."""

    argv: list[str]
    master: str
    deploy_mode: str  # client or cluster

    @property
    def cluster_driver(self) -> bool:
        """The driver runs on the cluster (deploy mode cluster), not beside the task."""
        return self.deploy_mode == "cluster"

    def with_options(self, options: list[str], application: str) -> SparkCommand:
        """The command with spark-submit `options` added before `application` (and its arguments)."""
        at = self.argv.index(application)
        return SparkCommand([*self.argv[:at], *options, *self.argv[at:]], self.master, self.deploy_mode)


def spark_command(application: str, args: list[str], conn_id: str | None, variable_master: str,
                  spark: SparkSpec | None = None, conf: dict[str, str] | None = None,
                  name: str = "streamfill") -> SparkCommand:
    """spark-submit of `application` with `args`, on the connection `conn_id` (None: `variable_master`, in client
    mode); `conf` is streamfill's own, the entry's `spark.conf` goes over it. The spark-submit beside this
    interpreter (PySpark's) runs when the connection names the default binary and one is there."""
    spark = spark or SparkSpec()
    hook = _hook(_connection(conn_id, variable_master), conf={**(conf or {}), **spark.conf_values()},
                 packages=",".join(spark.packages) or None,
                 executor_memory=spark.executor_memory, executor_cores=spark.executor_cores,
                 driver_memory=spark.driver_memory, num_executors=spark.num_executors, name=name,
                 application_args=list(args))
    # the hook writes the command as its own submit() runs it; the task runs it itself, to stop a stream gracefully
    argv = hook._build_spark_submit_command(application)
    return SparkCommand([_binary(argv[0]), *argv[1:]], _flag(argv, "--master") or variable_master,
                        _flag(argv, "--deploy-mode") or "client")


def _connection(conn_id: str | None, variable_master: str):
    from airflow.sdk import BaseHook, Connection

    if conn_id is None:
        return Connection(conn_id=VARIABLE_MASTER_CONN, conn_type="spark", host=variable_master)
    return BaseHook.get_connection(conn_id)  # the hook would fall back to yarn, silently, on one Airflow lacks


def _hook(conn, **kwargs):
    try:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    except ImportError as exc:
        raise OptionError("spark_conn_id", conn.conn_id, f"needs the Airflow provider {PROVIDER}, which this "
                          f"environment cannot import ({exc})", INSTALL_PROVIDER) from None

    class OnConnection(SparkSubmitHook):
        """The hook on a connection already read (or made for the Variable's master)."""

        def get_connection(self, conn_id: str):
            return conn

    try:
        return OnConnection(conn_id=conn.conn_id, **kwargs)
    except ValueError as exc:  # the hook refuses a spark-binary it does not know
        raise OptionError(f"extra of connection {conn.conn_id}", conn.extra, str(exc),
                          "Fix the connection (Admin > Connections)") from None


def _binary(named: str) -> str:
    beside = Path(sys.executable).parent / named
    return str(beside) if beside.exists() else shutil.which(named) or named


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None

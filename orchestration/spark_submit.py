"""spark-submit of a job for as long as its Airflow task runs: its output in the task log, and its process group
stopped with the task (or, for the stream, its batch in flight committed first). The command is the apache-spark
provider's (orchestration/spark_command.py); its exit code says whether a retry can help (orchestration/failures.py)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from streamfill import REPO_ROOT, durations, requirements, spark_jobs
from streamfill.kafka_client import describe
from streamfill.orchestration.endpoints import Endpoints
from streamfill.orchestration.failures import launch_failed
from streamfill.orchestration.spark_command import spark_command
from streamfill.orchestration.task_lineage import lineage_parent
from streamfill.settings import STOP_WITH_ENV, get_settings
from streamfill.spark_jobs import class_archive, py_files
from streamfill.spark_jobs.pipelines.nested_specs import SparkSpec

log = logging.getLogger("streamfill.orchestration")

RETRY_WAIT = "2m"  # how long a task's launch waits for an earlier launch of its job to let go (--wait-for-job)
KILL_AFTER_S = 3.0  # a bounded job: Airflow's supervisor sends SIGKILL 5 s after SIGTERM, the job goes before


def spark_submit(script: str, args: list[str], ends: Endpoints, extra_env: dict[str, str] | None = None,
                 graceful: bool = False, spark: SparkSpec | None = None, name: str = "streamfill") -> None:
    """spark-submit of spark_jobs/<script> with the project's interpreter, its output in the task log, on the
    connection `ends.spark_conn` (else the Variable's master) with the entry's `spark` settings; `name` is the
    Spark application's.

    The job runs in its own process group. When Airflow stops the task (SIGTERM, then SIGKILL 5 s later from
    its task supervisor):
    - a bounded job's whole group gets SIGTERM and, KILL_AFTER_S later, SIGKILL, inside Airflow's window; should
      the task process die first, the kernel kills spark-submit with it (PR_SET_PDEATHSIG);
    - a `graceful` job (the stream) gets SIGTERM in its Python driver only, and the task ends at once: the job
      outlives it to commit its batch in flight within its stop grace, then ends (spark_jobs/stream.py), and also
      stops when it sees the task gone. A retry's launch waits for it (--wait-for-job): fencing keeps the two apart.
    A non-zero exit fails the task: at once for a refusal, through its retries otherwise.
    """
    application = str(Path(spark_jobs.__file__).parent / script)
    command = spark_command(application, args, ends.spark_conn, ends.spark_master, spark,
                            {"spark.ui.showConsoleProgress": "false"}, name)
    cluster = py_files.ships(command.master)
    if cluster:
        # a cluster's workers may not have streamfill: its packages go with the job, and a driver beside the task
        # stays this interpreter even when spark.pyspark.python names the workers' one (spark_jobs/py_files.py,
        # docs/infrastructure.md)
        driver = [] if command.cluster_driver else ["--conf", f"spark.pyspark.driver.python={sys.executable}"]
        command = command.with_options(["--py-files", str(py_files.archive(get_settings().home)), *driver],
                                       application)
    requirements.check_java()
    cmd = command.argv
    # a cluster's executors run the PYSPARK_PYTHON of Airflow's environment when it names one
    workers_python = os.environ.get("PYSPARK_PYTHON", sys.executable) if cluster else sys.executable
    parent = lineage_parent()
    env = {**(py_files.driver_paths(get_settings().home) if cluster else {}), **os.environ, **ends.env(),
           "STREAMFILL_SPARK_MASTER": command.master,
           **(parent.environ() if parent else {}), **(extra_env or {}), "PYSPARK_PYTHON": workers_python,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    env = class_archive.with_archive(env, get_settings().home)
    if graceful:
        env[STOP_WITH_ENV] = str(os.getpid())
    log.info("running %s against Kafka %s", " ".join(cmd), describe(ends.kafka))
    proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=None if graceful else _die_with_parent)
    stopped = False

    def stop(signum, _frame) -> None:
        nonlocal stopped
        driver = _python_driver(proc, script) if graceful else None
        if driver is not None:
            log.warning("task stopped (signal %d): %s commits its batch in flight and stops on its own (pid %d)",
                        signum, script, driver)
            os.kill(driver, signal.SIGTERM)
            stopped = True
        else:
            log.warning("task stopped (signal %d): stopping %s%s", signum, script,
                        " (its Python driver has not started: nothing is in flight)" if graceful else "")
            _kill_group(proc)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for line in proc.stdout:
            if " WARN " not in line:  # Spark's JVM warnings drown the job's own lines
                print(line, end="", flush=True)
        code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None and not stopped:
            _kill_group(proc)
    if code != 0:
        raise launch_failed(script, code)


def retry_wait(grace_s: float) -> str:
    """--wait-for-job of a stream task's launch: an earlier launch may still be committing its batch in flight
    (its grace and a minute, RETRY_WAIT at least)."""
    return f"{max(durations.parse_ms(RETRY_WAIT) // 1000, int(grace_s) + 60)}s"


def _python_driver(proc: subprocess.Popen, script: str) -> int | None:
    """The pid of the job's Python driver (spark-submit's JVM starts it), None while there is none yet."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue  # a Python worker or helper that ended meanwhile
        if argv and Path(argv[0]).name.startswith("python") and any(
                part.endswith(f"spark_jobs/{script}") for part in argv[1:]):
            return child.pid
    return None


def _libc():
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()  # loaded here, never between fork and exec


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the task process dies (Linux prctl PR_SET_PDEATHSIG)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass

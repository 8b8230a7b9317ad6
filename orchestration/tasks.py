"""What the DAGs' tasks do, kept out of the DAG files: settings from Airflow connections, spark-submit with the
task's lifetime, the stream's health, and the job names of windows and replays.

Set up by `streamfill stack up` in Airflow's environment (AIRFLOW_CONN_*, AIRFLOW_VAR_*), or in the UI:
connections `streamfill_postgres` (offsets_db and the sink tables) and `streamfill_kafka` (the cluster: address,
security and credentials, orchestration.connections), variable `streamfill_spark_master`. Nothing about them is
in a DAG file.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from streamfill.offsets_db import queries, revision
from streamfill.offsets_db.engine import make_engine
from streamfill.orchestration import dag_ids
from streamfill.orchestration.connections import (
    POSTGRES_CONNECTION,
    SCHEMA_REGISTRY_CONNECTION,
    kafka_client,
    postgres_url,
    schema_registry_client,
    schema_registry_env,
)
from streamfill import spark_jobs
from streamfill.spark_jobs import class_archive, py_files
from streamfill.spark_jobs.runs import flag
from streamfill import REPO_ROOT, durations, requirements
from streamfill.errors import OptionError, UnknownJob
from streamfill.kafka_client import KAFKA_CONNECTION, describe, settings_env
from streamfill.partitions import TopicPartition
from streamfill.settings import STOP_WITH_ENV, get_settings

log = logging.getLogger("streamfill.orchestration")

POSTGRES_CONN, KAFKA_CONN, SPARK_MASTER_VAR = POSTGRES_CONNECTION, KAFKA_CONNECTION, "streamfill_spark_master"


# the backfill's flags the replay form sets, each as the form's field named like the flag (--chunk-size is
# chunk_size), so that a check of the backfill fails in the form's words
FORM_FIELDS = {f: f[2:].replace("-", "_")
               for f in map(flag, ("job", "from_", "to", "mode", "table", "chunk_size"))}
_FLAG = re.compile("(?:" + "|".join(map(re.escape, FORM_FIELDS)) + r")\b")


def refuse_unknown_conf(dag_id: str, conf: Mapping[str, object], params: Mapping[str, object]) -> None:
    """A triggered run's conf may only set the DAG's declared Params (`dag.params`: the task's merged params hold
    the conf's keys too). Airflow accepts any key, so a misspelt `from` would otherwise replay the whole topic
    from the default."""
    for key in sorted(set(conf) - set(params)):
        close = difflib.get_close_matches(key, list(params), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise OptionError(key, conf[key], f"is not a field of {dag_id}'s form (its fields: {', '.join(params)})",
                          f"{hint}Trigger the run again with the form's fields only")


def as_form_error(exc: OptionError) -> OptionError:
    """A backfill check's error in the replay form's words: its fields, not the command line's flags."""
    def words(text: str) -> str:
        return _FLAG.sub(lambda m: FORM_FIELDS[m.group(0)], text)

    return OptionError(FORM_FIELDS.get(exc.option, exc.option), exc.value, words(exc.problem), words(exc.fix))


@dataclass(frozen=True)
class Endpoints:
    db_url: str
    kafka: Mapping[str, str]  # librdkafka settings of the cluster, credentials included
    spark_master: str
    schema_registry: Mapping[str, str] = field(default_factory=dict)  # the registry's client settings, if any

    def env(self) -> dict[str, str]:
        """The job's STREAMFILL_* settings; credentials travel in the environment, never on a command line."""
        return {"STREAMFILL_DB_URL": self.db_url, **settings_env(self.kafka),
                **schema_registry_env(self.schema_registry),
                "STREAMFILL_SPARK_MASTER": self.spark_master}


def endpoints() -> Endpoints:
    """From the Airflow connections and variable; call inside a task."""
    from airflow.sdk import BaseHook, Variable
    from airflow.sdk.exceptions import AirflowNotFoundException

    url = postgres_url(BaseHook.get_connection(POSTGRES_CONN))
    kafka = kafka_client(BaseHook.get_connection(KAFKA_CONN))
    try:
        registry = schema_registry_client(BaseHook.get_connection(SCHEMA_REGISTRY_CONNECTION))
    except AirflowNotFoundException:
        registry = {}  # no Avro entry reads a registry here
    return Endpoints(url, kafka, Variable.get(SPARK_MASTER_VAR, default="local[*]"), registry)


def spark_submit(script: str, args: list[str], ends: Endpoints, extra_env: dict[str, str] | None = None,
                 graceful: bool = False) -> None:
    """spark-submit of spark_jobs/<script> with the project's interpreter, its output in the task log.

    The job runs in its own process group. When Airflow stops the task (SIGTERM, then SIGKILL 5 s later from
    its task supervisor):
    - a bounded job's whole group gets SIGTERM and, KILL_AFTER_S later, SIGKILL, inside Airflow's window; should
      the task process die first, the kernel kills spark-submit with it (PR_SET_PDEATHSIG);
    - a `graceful` job (the stream) gets SIGTERM in its Python driver only, and the task ends at once: the job
      outlives it to commit its batch in flight within its stop grace, then ends (spark_jobs/stream.py), and also
      stops when it sees the task gone. A retry's launch waits for it (--wait-for-job): fencing keeps the two apart.
    A non-zero exit fails the task.
    """
    bin_dir = Path(sys.executable).parent
    cluster = py_files.ships(ends.spark_master)
    # a cluster's workers may not have streamfill: its packages go with the job, and the driver stays this
    # interpreter even when spark.pyspark.python names the workers' one (spark_jobs/py_files.py, docs/infrastructure.md)
    ship = ["--py-files", str(py_files.archive(get_settings().home)),
            "--conf", f"spark.pyspark.driver.python={sys.executable}"] if cluster else []
    requirements.check_java()
    cmd = [str(bin_dir / "spark-submit"), "--master", ends.spark_master, *ship,
           "--conf", "spark.ui.showConsoleProgress=false", str(Path(spark_jobs.__file__).parent / script), *args]
    # a cluster's executors run the PYSPARK_PYTHON of Airflow's environment when it names one
    workers_python = os.environ.get("PYSPARK_PYTHON", sys.executable) if cluster else sys.executable
    parent = lineage_parent()
    env = {**(py_files.driver_paths(get_settings().home) if cluster else {}), **os.environ, **ends.env(),
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
        raise RuntimeError(f"{script} exited with {code}; its output is above")


RETRY_WAIT = "2m"  # how long a task's launch waits for an earlier launch of its job to let go (--wait-for-job)
KILL_AFTER_S = 3.0  # a bounded job: Airflow's supervisor sends SIGKILL 5 s after SIGTERM, the job goes before


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


def lineage_parent(context=None):
    """The OpenLineage run of the Airflow task running now (spark_jobs.lineage_events.Parent), with the ids
    Airflow's OpenLineage provider gives the task and its DAG run, so the job's events join the provider's in one
    graph; None outside a task. The namespace is the provider's: OPENLINEAGE_NAMESPACE, else `default`."""
    from streamfill.spark_jobs.lineage_events import Parent, airflow_dag_run_id, airflow_task_run_id

    if context is None:
        from airflow.sdk import get_current_context

        try:
            context = get_current_context()
        except Exception:  # noqa: BLE001 - not inside a task (a CLI launch): no parent
            return None
    ti, dag_run = context["ti"], context["dag_run"]
    namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or "default"
    instant = dag_run.logical_date or dag_run.run_after
    task_run = airflow_task_run_id(namespace, ti.dag_id, ti.task_id, ti.try_number, ti.map_index, instant)
    dag_run_id = airflow_dag_run_id(namespace, ti.dag_id, getattr(dag_run, "clear_number", 0) or 0, instant)
    return Parent(namespace, f"{ti.dag_id}.{ti.task_id}", task_run, namespace, ti.dag_id, dag_run_id)


def window_event(db_url: str, entry: str, job: str, start: datetime, end: datetime) -> tuple[str, dict]:
    """(partition key, extra) of the asset event of a window's run: the window's start as the key, and what this
    pass of the window's job committed (rows, dead letters, offsets per partition), marked as a re-run from its
    second pass on."""
    from streamfill.offsets_db.announce_plan import WINDOW, WINDOW_KEY_FORMAT, to_extra
    from streamfill.offsets_db.announcements import newest_pass

    engine = make_engine(db_url)
    try:
        revision.require(engine)
        number, covered = newest_pass(engine, job)
    except UnknownJob:  # nothing recorded the window's job: nothing landed
        number, covered = 1, None
    finally:
        engine.dispose()
    key = start.astimezone(timezone.utc).strftime(WINDOW_KEY_FORMAT)
    return key, to_extra(WINDOW, job, covered, entry=entry, window={"start": iso(start), "end": iso(end)},
                         **{"pass": number, "rerun": number > 1})


def replay_job(job: str, from_: str, to: str, table: str) -> str:
    """The same replay asked twice is the same job: append-new then changes nothing, replace rewrites."""
    from streamfill.spark_jobs.backfill import backfill_job

    return backfill_job(job, from_, to, table, kind="replay")


def iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat()


@dataclass(frozen=True)
class Health:
    last_commit: datetime | None
    max_lag: int | None
    problems: list[str]
    caught_up: bool = False  # the job's position is the log end in every partition (a quiet topic)


def health(db_url: str, job: str, max_commit_age: timedelta, max_lag: int, kafka: Mapping[str, str] | None = None,
           now: datetime | None = None) -> Health:
    """A stream is unhealthy when its newest commit is too old or a partition lags too far (consumer_lag), unless
    the broker (`kafka`) says it stands at the log end of every partition: a quiet topic has nothing to commit."""
    now = now or datetime.now(timezone.utc)
    engine = make_engine(db_url)
    try:
        revision.require(engine)
        last, lag = queries.last_commit_and_worst_lag(engine, job)
        positions = {TopicPartition(t, p): o for t, p, o in queries.positions(engine, job)}
    finally:
        engine.dispose()
    stale = last is None or now - last > max_commit_age
    caught_up = bool(stale and kafka is not None and positions and at_log_end(kafka, positions))
    return Health(last, lag, health_problems(job, last, lag, max_commit_age, max_lag, now, caught_up), caught_up)


def at_log_end(kafka: Mapping[str, str], positions: Mapping[TopicPartition, int]) -> bool:
    """Whether every partition's next offset is the broker's log end now (the last stable offset, as the
    source reads)."""
    from streamfill.connectors.kafka.broker import Broker

    ends = Broker(kafka, timeout_s=10).watermarks(sorted(positions))
    return all(offset >= ends[tp][1] for tp, offset in positions.items())


def health_problems(job: str, last: datetime | None, lag: int | None, max_commit_age: timedelta, max_lag: int,
                    now: datetime, caught_up: bool = False) -> list[str]:
    """The thresholds of the entry's `health:` against the job's last commit and worst partition's lag; the
    health DAG fails on them and the streamfill page marks them red. A job `caught_up` at the log end is
    healthy whatever the age of its newest commit."""
    problems = []
    if caught_up:
        return problems
    if last is None:
        problems.append(f"job {job!r} has never committed a batch; is {dag_ids.stream(job)} running?")
    elif now - last > max_commit_age:
        problems.append(f"job {job!r} last committed at {last:%Y-%m-%d %H:%M:%S} UTC, {now - last} ago "
                        f"(threshold {max_commit_age}) and has records left to read; check "
                        f"{dag_ids.stream(job)}'s log")
    if lag is not None and lag > max_lag:
        problems.append(f"job {job!r} lags {lag:,} offsets on its worst partition (threshold {max_lag:,}); "
                        "see `streamfill offsets lag --job " + job + "`")
    return problems

"""streamfill's operators, sensor, trigger and hook as a DAG of a team's own sees them: listed in the provider info,
each on the connections it is given (an entry's, else the defaults), Spark submitted through the apache-spark
provider's hook, and failures classed (a refusal fails the task without retries, an outage is retried)."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from streamfill.errors import BrokerError, BrokerRefused, Fenced, JobBusy, OptionError, RegistryError, RevisionMismatch
from streamfill.partitions import TopicPartition

pytestmark = pytest.mark.unit


def test_the_provider_info_lists_the_operators_sensor_trigger_and_hooks_as_airflows_schema_asks():
    import jsonschema
    from airflow import __file__ as airflow_init

    from streamfill.orchestration.provider import get_provider_info

    info = get_provider_info()
    schema = json.loads((Path(airflow_init).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    listed = {kind: [m for entry in info[kind] for m in entry["python-modules"]]
              for kind in ("operators", "sensors", "triggers", "hooks")}
    found = {kind: {name for module in modules for name in vars(importlib.import_module(module))
                    if name.startswith(("Streamfill", "CommittedThrough"))} for kind, modules in listed.items()}
    assert {"StreamfillStreamOperator", "StreamfillBackfillOperator", "StreamfillQualityOperator"} <= found["operators"]
    assert "CommittedThroughSensor" in found["sensors"] and "CommittedThroughTrigger" in found["triggers"]
    assert "StreamfillOffsetsHook" in found["hooks"]


@pytest.mark.parametrize("error", [
    OptionError("--from", "x", "is not a position", "use earliest"), JobBusy("job 'a' is held by another launch"),
    Fenced("job 'a' was taken over"), RevisionMismatch("offsets_db stands at 0009"),
    BrokerRefused("the cluster refused the SASL login"), AirflowNotFoundException("The conn_id `db2` isn't defined"),
], ids=lambda e: type(e).__name__)
def test_a_configuration_error_or_a_refusal_fails_the_task_without_a_retry(error):
    from streamfill.orchestration.failures import classed

    with pytest.raises(AirflowFailException, match="not retried") as raised:
        with classed():
            raise error
    assert str(error) in str(raised.value)


def test_a_jobs_file_error_is_a_refusal_and_an_outage_is_left_to_the_retries():
    from streamfill.offsets_db.engine import OffsetsDbUnreachable
    from streamfill.orchestration.failures import classed
    from streamfill.spark_jobs.pipelines import JobsFileError

    with pytest.raises(AirflowFailException):
        with classed():
            raise JobsFileError("jobs.yaml: job 'a': table is required")
    outages = [OffsetsDbUnreachable("postgresql://db/x", OSError("connection refused")),
               BrokerError("listing topics failed after 30.0 s"), RegistryError("the registry did not answer"),
               RuntimeError("anything else")]
    for outage in outages:
        with pytest.raises(type(outage)):  # as raised: Airflow retries it
            with classed():
                raise outage


def test_a_spark_submitted_jobs_exit_code_says_what_ended_it_and_the_task_reads_it():
    from dataclasses import dataclass

    from sqlalchemy.exc import OperationalError

    from streamfill.console import EXIT_CODES, fail, refusals
    from streamfill.errors import BAD_INPUT, HELD, OUTAGE, REFUSAL, StreamfillError
    from streamfill.offsets_db.engine import OffsetsDbUnreachable
    from streamfill.orchestration.failures import launch_failed
    from streamfill.spark_jobs.job_flags import submit_main

    @dataclass(frozen=True)
    class Args:
        job: str

        @classmethod
        def from_flags(cls, **flags):
            return cls(**flags)

    def ended_by(error: BaseException) -> int:
        def launch(args, master):
            with refusals():
                raise error
        with pytest.raises(SystemExit) as stop:
            submit_main(Args, launch, ["--job", "a"], "job.py")
        return stop.value.code

    # the same codes as the `streamfill` command's (docs/operations.md#exit-codes)
    assert ended_by(OptionError("--from", "x", "is not a position", "use earliest")) == EXIT_CODES[BAD_INPUT] == 2
    assert ended_by(Fenced("job 'a' was taken over")) == EXIT_CODES[REFUSAL] == 78
    assert ended_by(JobBusy("held")) == EXIT_CODES[HELD] == 73
    assert ended_by(OffsetsDbUnreachable("postgresql://db/x", OSError("refused"))) == EXIT_CODES[OUTAGE] == 75
    assert ended_by(OperationalError("SELECT 1", {}, OSError("connection refused"))) == EXIT_CODES[OUTAGE]
    assert ended_by(StreamfillError("stream 'a' failed: executor lost")) == 1
    assert ended_by(RuntimeError("a bug")) == 1
    assert fail(JobBusy("held")).code == EXIT_CODES[HELD]  # as the `streamfill` command's

    for kind in (BAD_INPUT, REFUSAL, HELD):  # its retries cannot help: a held job's launch already waited
        assert isinstance(launch_failed("stream.py", EXIT_CODES[kind]), AirflowFailException), kind
    assert "held by another launch" in str(launch_failed("stream.py", EXIT_CODES[HELD]))
    for code in (EXIT_CODES[OUTAGE], 1, 137):
        failed = launch_failed("stream.py", code)
        assert isinstance(failed, AirflowException) and not isinstance(failed, AirflowFailException)


def test_spark_is_submitted_with_the_providers_hook_on_the_named_connection_with_the_entrys_spark_settings(
        monkeypatch):
    from streamfill.orchestration.failures import classed
    from streamfill.orchestration.spark_command import spark_command
    from streamfill.spark_jobs.pipelines.nested_specs import SparkSpec

    monkeypatch.setenv("AIRFLOW_CONN_TEAM_SPARK", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}}))
    spark = SparkSpec(conf={"spark.sql.shuffle.partitions": 8, "spark.speculation": True}, executor_memory="2g",
                      executor_cores=2, driver_memory="1g", num_executors=3, packages=["org.example:extra:1.0"])
    on_yarn = spark_command("/app/backfill.py", ["--job", "a"], "team_spark", "local[*]", spark,
                            {"spark.ui.showConsoleProgress": "false"}, "streamfill-backfill-a")
    argv = on_yarn.argv
    pairs = {argv[i]: argv[i + 1] for i in range(1, argv.index("/app/backfill.py"), 2)}
    assert (on_yarn.master, on_yarn.deploy_mode, on_yarn.cluster_driver) == ("yarn", "cluster", True)
    assert {k: pairs[k] for k in ("--master", "--deploy-mode", "--queue", "--executor-memory", "--executor-cores",
                                  "--driver-memory", "--num-executors", "--packages", "--name")} == {
        "--master": "yarn", "--deploy-mode": "cluster", "--queue": "etl", "--executor-memory": "2g",
        "--executor-cores": "2", "--driver-memory": "1g", "--num-executors": "3",
        "--packages": "org.example:extra:1.0", "--name": "streamfill-backfill-a"}
    confs = [argv[i + 1] for i, part in enumerate(argv) if part == "--conf"]
    assert confs == ["spark.ui.showConsoleProgress=false", "spark.sql.shuffle.partitions=8", "spark.speculation=true"]
    assert argv[argv.index("/app/backfill.py"):] == ["/app/backfill.py", "--job", "a"]

    # no connection named: the Variable's master in client mode, as before; PySpark's spark-submit
    local = spark_command("/app/stream.py", [], None, "local[2]")
    assert (local.master, local.deploy_mode) == ("local[2]", "client")
    assert local.argv[0].endswith("/spark-submit") and Path(local.argv[0]).exists()
    assert "--deploy-mode" not in local.argv and "--queue" not in local.argv
    added = local.with_options(["--py-files", "/x.zip"], "/app/stream.py").argv
    assert added[added.index("--py-files") + 1] == "/x.zip" and added.index("--py-files") < added.index("/app/stream.py")

    # a connection Airflow does not have is not quietly YARN: the task fails naming it
    with pytest.raises(AirflowFailException, match="no_such_spark"):
        with classed():
            spark_command("/app/stream.py", [], "no_such_spark", "local[*]")


def test_an_entry_names_its_connections_and_spark_settings_and_an_operators_own_go_first(tmp_path):
    from streamfill.orchestration.endpoints import ConnIds
    from streamfill.spark_jobs.pipelines import JobsFileError, read

    def entry(extra: str) -> str:
        return f"jobs:\n  a:\n    topic: a\n    table: a\n    columns: {{id: {{type: string}}}}\n{extra}"

    path = tmp_path / "jobs.yaml"
    path.write_text(entry("    postgres_conn_id: warehouse_b\n    spark_conn_id: spark_default\n"
                          "    spark: {executor_memory: 4g, conf: {spark.sql.shuffle.partitions: 16}}\n"))
    spec = read(path)["a"]
    assert ConnIds() == ConnIds("streamfill_kafka", "streamfill_postgres", "streamfill_schema_registry", None)
    assert ConnIds.of(spec) == ConnIds("streamfill_kafka", "warehouse_b", "streamfill_schema_registry",
                                       "spark_default")
    assert ConnIds.of(spec, postgres="other", kafka="team_kafka", spark=None) == ConnIds(
        "team_kafka", "other", "streamfill_schema_registry", "spark_default")
    assert spec.spark.conf_values() == {"spark.sql.shuffle.partitions": "16"}

    for extra, named in (("    postgres_conn_id: 'a b'\n", "postgres_conn_id"),
                         ("    spark: {executor_memory: lots}\n", "spark.executor_memory"),
                         ("    spark: {conf: {shuffle.partitions: 4}}\n", "spark.conf"),
                         ("    spark: {packages: [postgresql]}\n", "spark.packages"),
                         ("    spark: {master: yarn}\n", "spark.master")):
        path.write_text(entry(extra))
        with pytest.raises(JobsFileError, match=rf"job 'a': .*{named.replace('.', '[.]')}"):
            read(path)


class Offsets:
    """What the coverage check reads of offsets_db, for its pure logic: each job's next offsets."""

    def __init__(self, **positions: dict[TopicPartition, int]) -> None:
        self.positions = positions

    def position(self, job: str) -> dict[TopicPartition, int]:
        return dict(self.positions.get(job, {}))


def test_a_jobs_commits_cover_offsets_another_jobs_position_and_a_time_only_once_committed_through_them():
    from streamfill.orchestration.committed_through import Through, coverage

    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    hook = Offsets(stream={t0: 100, t1: 40}, backfill={t0: 100, t1: 41}, empty={})
    offsets = Through.of("stream", offsets={"t": {"0": 99, "1": 39}})
    assert coverage(hook, offsets).covered  # offset 99 is committed: the next offset is 100
    short = coverage(hook, Through.of("stream", offsets='{"t": {"0": 100}}'))
    assert not short.covered and short.left == ["t-0: next offset 100, needs 101"]
    behind = coverage(hook, Through.of("stream", other_job="backfill"))
    assert not behind.covered and behind.left == ["t-1: next offset 40, needs 41"]
    assert coverage(hook, Through.of("backfill", other_job="stream")).covered
    assert coverage(hook, Through.of("stream", other_job="empty")).left == ["job 'empty' has committed nothing yet"]
    ahead = datetime.now(timezone.utc) + timedelta(hours=1)
    assert not coverage(hook, Through.of("stream", time=ahead.isoformat())).covered
    assert coverage(hook, Through.of("empty", time="2026-01-01T00:00:00")).left == [
        "job 'empty' has committed nothing yet"]

    # a point is named once, in a form the check can read; the error says which and how
    for bad in ({}, {"offsets": {"t": {"0": 1}}, "other_job": "b"}):
        with pytest.raises(OptionError, match="exactly one of the three"):
            Through.of("stream", **bad)
    with pytest.raises(OptionError, match="time='yesterday': is not an ISO-8601 time"):
        Through.of("stream", time="yesterday")
    with pytest.raises(OptionError, match="is not a mapping of topic to partition to offset"):
        Through.of("stream", offsets={"t": 5})
    # naive times are UTC; the trigger's arguments are JSON and give the same point back
    point = Through.of("stream", time="2026-11-20T10:00:00")
    assert point.time == datetime(2026, 11, 20, 10, tzinfo=timezone.utc)
    assert Through.of(**json.loads(json.dumps(offsets.kwargs()))) == offsets


def test_the_sensor_defers_to_a_trigger_that_serializes_its_point_and_refuses_a_second_point():
    from airflow.sdk.exceptions import TaskDeferred

    from streamfill.orchestration.committed_through_sensor import CommittedThroughSensor
    from streamfill.orchestration.committed_through_trigger import CommittedThroughTrigger

    sensor = CommittedThroughSensor(task_id="through", job="orders", other_job="orders.backfill.1",
                                    postgres_conn_id="warehouse_b", poke_interval=5)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    path, kwargs = trigger.serialize()
    assert path == "streamfill.orchestration.committed_through_trigger.CommittedThroughTrigger"
    assert kwargs == {"job": "orders", "offsets": None, "time": None, "other_job": "orders.backfill.1",
                      "postgres_conn_id": "warehouse_b", "kafka_conn_id": "streamfill_kafka", "poll_interval": 5.0}
    assert CommittedThroughTrigger(**json.loads(json.dumps(kwargs))).serialize() == (path, kwargs)
    assert deferred.value.method_name == "execute_complete"
    assert sensor.execute_complete({}, {"status": "covered", "job": "orders", "point": "p",
                                        "position": {"orders": {"0": 5}}}) == {"orders": {"0": 5}}
    with pytest.raises(AirflowFailException, match="job 'x' is not valid"):
        sensor.execute_complete({}, {"status": "refused", "message": "job 'x' is not valid"})
    with pytest.raises(ValueError, match="exactly one of offsets, time and other_job"):
        CommittedThroughSensor(task_id="both", job="orders", other_job="b", time="2026-01-01T00:00:00")


def test_a_detached_streams_supervision_reads_the_jobs_file_its_task_pinned_not_the_triggerers(tmp_path,
                                                                                                monkeypatch):
    """The triggerer has neither the Variable streamfill_jobs_file nor the task's STREAMFILL_JOBS_FILE: the trigger
    carries the file the task read its entry from, and follows a change made there."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import TaskDeferred

    from streamfill.orchestration.jobs_file_variable import ENV
    from streamfill.orchestration.stream_operator import StreamfillStreamOperator
    from streamfill.orchestration.stream_supervision import StreamSupervision
    from streamfill.spark_jobs import stream_detached

    def entry(columns: str) -> str:
        return f"jobs:\n  a:\n    topic: a\n    table: a\n    columns: {{{columns}}}\n"

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(entry("id: {type: string}"))
    monkeypatch.setenv(ENV, str(tmp_path / "not-this-one.yaml"))
    monkeypatch.setenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", str(jobs))  # the Variable names the file, as in a team's
    monkeypatch.setattr(stream_detached, "start_detached", lambda *args, **kwargs: SimpleNamespace(
        run_id=7, describe=lambda: "stream a runs detached"))
    task = StreamfillStreamOperator(task_id="stream", entry="a")
    spec = task.entry_spec()
    ends = SimpleNamespace(spark_remote="sc://spark:15002", kafka={}, db_url="postgresql://db/x")
    with pytest.raises(TaskDeferred) as deferred:
        task.detach(spec, ends, restarts=0)
    path, kwargs = deferred.value.trigger.serialize()
    assert path == "streamfill.orchestration.stream_supervision.StreamSupervision"
    assert kwargs["jobs_file"] == str(jobs)

    # on the triggerer: no Variable, and STREAMFILL_JOBS_FILE (if any) names another file or none
    monkeypatch.delenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE")
    monkeypatch.delenv(ENV)
    trigger = StreamSupervision(**json.loads(json.dumps(kwargs)))
    assert trigger.serialize() == (path, kwargs)
    assert trigger._entry_changed() is None, "the entry the stream runs is the file's"
    jobs.write_text(entry("id: {type: string}, amount: {type: double}"))
    assert trigger._entry_changed() == "the jobs file's entry changed"


def test_the_offsets_hook_reads_offsets_db_through_the_postgres_connection_it_is_given(monkeypatch):
    from streamfill.orchestration.offsets_hook import StreamfillOffsetsHook

    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE_B", json.dumps(
        {"conn_type": "postgres", "host": "db-b.internal", "port": 5433, "schema": "warehouse", "login": "reader",
         "password": "s3cret-pass", "extra": {"sslmode": "verify-full"}}))
    hook = StreamfillOffsetsHook("warehouse_b")
    url = hook.get_conn().url
    assert (url.host, url.port, url.database, url.username, url.query["sslmode"]) == (
        "db-b.internal", 5433, "warehouse", "reader", "verify-full")
    hook.close()
    assert StreamfillOffsetsHook().postgres_conn_id == "streamfill_postgres"


def test_the_spark_provider_is_installed_without_pyspark_client_and_pyspark_keeps_its_local_mode():
    """`make install` adds apache-airflow-providers-apache-spark with --no-deps: its requirement pyspark-client
    (Spark Connect's client alone) would install over PySpark's own package."""
    from importlib.metadata import PackageNotFoundError, distribution

    import pyspark

    assert distribution("apache-airflow-providers-apache-spark").version
    with pytest.raises(PackageNotFoundError):
        distribution("pyspark-client")
    importlib.import_module("airflow.providers.apache.spark.hooks.spark_submit")
    assert (Path(pyspark.__file__).parent / "jars").is_dir()  # the JVM side local mode runs on

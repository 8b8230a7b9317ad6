"""The local stack as a user drives it: the CLI, its errors, and each service answering real requests."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
import warnings
from contextlib import closing
from pathlib import Path

import pytest

from streamfill import REPO_ROOT
from streamfill.cli.stack import StackError
from streamfill.cli.stack.airflow import admin_password, airflow_bin, airflow_env
from streamfill.cli.stack.kafka import Kafka, fetch_jars
from streamfill.cli.stack.process import read_pid
from streamfill.settings import Settings
from tests.shared_run import AIRFLOW_GROUP

pytestmark = pytest.mark.integration
CLI = [str(Path(sys.executable).parent / "streamfill")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _isolated_env(tmp_path: Path, **ports: int) -> dict[str, str]:
    env = {**os.environ, "STREAMFILL_HOME": str(tmp_path / "stack")}
    for name in (field.upper() for field in Settings.model_fields if field.endswith("_port")):
        env[f"STREAMFILL_{name}"] = str(ports.get(name, _free_port()))
    return env


def test_up_refuses_a_port_in_use_before_starting_anything(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = _isolated_env(tmp_path, AIRFLOW_PORT=port)
        done = subprocess.run([*CLI, "stack", "up"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 75  # a service that cannot start (docs/operations.md#exit-codes)
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


def _healed(stack_settings) -> None:
    """The shared stack healthy before a test that makes claims about a healthy stack. After a heavy test
    Airflow's heartbeats may lag for a while; a service an earlier test left down, or an Airflow component that
    exited (they exit on some database errors and `airflow standalone` does not restart them), is brought back
    with `stack up`, as a user would, and reported as a warning with the errors Airflow logged."""
    from streamfill.cli.stack import services

    deadline = time.monotonic() + 120
    while not all(s.healthy() for s in services(stack_settings)):
        if time.monotonic() > deadline:
            break
        time.sleep(2)
    else:
        return
    broken = [(s.name, s.problem()) for s in services(stack_settings) if not s.healthy()]
    log = stack_settings.home / "logs" / "airflow.log"
    errors = [ln for ln in log.read_text(errors="replace").splitlines()[-4000:] if "Error" in ln or "Exception" in ln]
    warnings.warn(f"the shared stack was not healthy before this test: {broken}; Airflow's last errors: "
                  f"{errors[-12:]}")
    done = subprocess.run([*CLI, "stack", "up"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 120
    while not all(s.healthy() for s in services(stack_settings)):
        assert time.monotonic() < deadline, [(s.name, s.problem()) for s in services(stack_settings)]
        time.sleep(2)


@pytest.mark.whole_stack
def test_up_twice_changes_nothing_and_status_shows_every_service_healthy(stack_settings):
    _healed(stack_settings)
    pids_before = {p.name: read_pid(p) for p in (stack_settings.home / "run").glob("*.pid")}
    done = subprocess.run([*CLI, "stack", "up"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "stack already up: nothing to do" in done.stdout, done.stdout
    assert {p.name: read_pid(p) for p in (stack_settings.home / "run").glob("*.pid")} == pids_before
    status = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "200"})
    assert status.returncode == 0, status.stdout
    for name in ("postgres", "kafka", "schema-registry", "airflow", "spark"):
        line = next(ln for ln in status.stdout.splitlines() if f" {name} " in ln)
        assert "healthy" in line and "not" not in line
    assert "login admin at" in status.stdout


def test_the_drivers_jvm_maps_the_class_archive_stack_up_built(spark, stack_settings):
    from streamfill.spark_jobs.class_archive import archive_path

    path = archive_path(stack_settings.home)
    assert path is not None and path.is_file(), f"no class archive at {path}"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert str(path) in Path(f"/proc/{pid}/maps").read_text(), "the driver's JVM loaded its classes itself"


@pytest.mark.whole_stack
def test_a_service_that_died_is_shown_down_with_its_log_and_up_restarts_only_it(stack_settings):
    _healed(stack_settings)
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


def test_local_spark_runs_a_job_on_the_project_python(spark):
    """The session's SparkSession (spark_session on the stack's master): its workers run this interpreter. Not
    stopped here: getOrCreate hands every test of the process the same session."""
    rows = spark.sparkContext.parallelize(range(1000), 4).map(
        lambda x: (x % 2, __import__("sys").executable)).collect()
    assert len(rows) == 1000
    assert {exe for _, exe in rows} == {sys.executable}
    assert spark.range(1000).selectExpr("sum(id)").first()[0] == 499500


@pytest.mark.xdist_group(AIRFLOW_GROUP)
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


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by one of pids, from /proc/net/tcp and tcp6."""
    inodes = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else ():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))  # each 32-bit word is host-endian
            found.append((socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, raw),
                          int(hex_port, 16)))
    return found


def _stack_pids(settings) -> set[int]:
    """The postmaster and its backends, and every process of Kafka's, the registry's and Airflow's process
    groups."""
    from streamfill.cli.stack.postgres import Postgres

    leaders = {Postgres(settings).pid(), *(read_pid(settings.home / "run" / f"{name}.pid")
                                           for name in ("kafka", "schema-registry", "airflow"))}
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(entry.name) in leaders or int(fields[1]) in leaders or int(fields[2]) in leaders:
                pids.add(int(entry.name))
    return pids


@pytest.mark.whole_stack
def test_postgres_wants_the_password_and_nothing_of_the_stack_is_open_to_others(stack_settings, tmp_path):
    import psycopg2

    from streamfill.cli.stack.postgres import Postgres

    s = stack_settings
    password = s.db_password()
    assert password, f"stack up generates the password into {s.pg_password_file}"
    no_pgpass = tmp_path / "pgpass"
    no_pgpass.touch(mode=0o600)
    tcp = dict(host=s.host, port=s.pg_port, dbname=s.db_name, connect_timeout=5, passfile=str(no_pgpass))
    with pytest.raises(psycopg2.OperationalError, match="password"):
        psycopg2.connect(user=s.db_user, **tcp)
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(user=s.db_user, password="not-" + password, **tcp)
    with pytest.raises(psycopg2.OperationalError, match="rejects"):
        psycopg2.connect(user="postgres", password=password, **tcp)  # the superuser: socket only
    with closing(psycopg2.connect(user=s.db_user, password=password, **tcp)) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_user")
        assert cur.fetchone() == (s.db_user,)
    # TLS: the server's certificate is the stack CA's, for its host; another CA's clients refuse it
    verified = dict(tcp, user=s.db_user, password=password, sslmode="verify-full", sslrootcert=str(s.ca_file))
    with closing(psycopg2.connect(**verified)) as conn, conn.cursor() as cur:
        cur.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        assert cur.fetchone() == (True,)
    from streamfill.cli.stack.tls import ensure_ca

    other_ca, _ = ensure_ca(tmp_path / "other-ca")
    with pytest.raises(psycopg2.OperationalError, match="certificate verify failed"):
        psycopg2.connect(**dict(verified, sslrootcert=str(other_ca)))
    with closing(psycopg2.connect(host=str(Postgres(s).socket_dir), port=s.pg_port, user="postgres",
                                  dbname="postgres")) as conn, conn.cursor() as cur:  # peer, as the stack's OS user
        # every TCP client of the stack (Airflow's components, its tasks, the page, the tests) came over TLS
        cur.execute("SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_activity a "
                    "JOIN pg_stat_ssl s USING (pid) WHERE a.client_addr IS NOT NULL")
        over_tls, plain = cur.fetchone()
        assert over_tls > 0 and plain == 0, (over_tls, plain)
        cur.execute("SELECT rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid WHERE rolname = %s", (s.db_user,))
        assert cur.fetchone() == (True,)

    tls = s.tls_dir
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (
        Postgres(s).socket_dir, s.pg_password_file.parent, s.pg_password_file, s.airflow_password_file,
        s.kafka_password_file, tls, *tls.iterdir())}
    assert modes == {Postgres(s).socket_dir: 0o700, s.pg_password_file.parent: 0o700, s.pg_password_file: 0o600,
                     s.airflow_password_file: 0o600, s.kafka_password_file: 0o600, tls: 0o700,
                     tls / "ca.pem": 0o600, tls / "ca-key.pem": 0o600, tls / "kafka.pem": 0o600,
                     tls / "postgres.pem": 0o600}

    listeners = _listening(_stack_pids(s))
    ports = {port for _, port in listeners}
    assert {s.pg_port, s.kafka_port, s.kafka_controller_port, s.kafka_sasl_port, s.kafka_oauth_port,
            s.schema_registry_port, s.airflow_port} <= ports, listeners
    assert [(a, p) for a, p in listeners if a not in (s.host, f"::ffff:{s.host}")] == [], \
        f"every listener of the stack is bound to STREAMFILL_HOST={s.host}"

    status = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "400"})
    assert status.returncode == 0, status.stdout
    assert password not in status.stdout and admin_password(s) not in status.stdout
    assert str(s.pg_password_file) in status.stdout and str(s.airflow_password_file) in status.stdout


def _wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(1)


@pytest.mark.fault
@pytest.mark.whole_stack
def test_after_a_postgres_crash_up_restarts_what_does_not_answer_and_leaves_the_rest(stack_settings, bootstrap,
                                                                                    topic_name, tmp_path):
    """`pg_ctl stop -m immediate` under a running stream: Airflow's components exit on the refused connections
    while `airflow standalone` stays alive; up restarts PostgreSQL, then Airflow, saying so, and leaves Kafka
    alone. The stream's batch in flight fails; what committed before the crash holds exactly once."""
    from sqlalchemy import create_engine, text

    from streamfill.cli.stack.airflow import Airflow
    from streamfill.cli.stack.postgres import Postgres
    from tests.integration.test_exactly_once import _records
    from tests.integration.test_faults import assert_exactly_once, pause_at, start_driver, wait_for
    from tests.kafka_helpers import create_topic, produce

    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, _records(0, 1200))
    job, table, checkpoint, fp = f"{topic_name}-pg", f"{topic_name}_pg", tmp_path / "checkpoint", tmp_path / "fp"
    stream = start_driver(topic_name, job, table, checkpoint, pause_at(fp, "sink.staged", 2))
    try:
        wait_for(fp / "reached", stream, "the stream's second commit")
    except BaseException:
        os.killpg(stream.pid, signal.SIGKILL)
        raise

    postgres, airflow = Postgres(stack_settings), Airflow(stack_settings)
    kafka_pid, airflow_pid = Kafka(stack_settings).pid(), airflow.pid()
    crash = subprocess.run(postgres.pg_ctl("stop", "-m", "immediate", "-w"), capture_output=True, text=True,
                           timeout=120)
    assert crash.returncode == 0, crash.stderr
    _wait_for(airflow.broken, 300, "an Airflow component exits on the refused connections")
    assert airflow.pid() == airflow_pid, "airflow standalone itself stays alive"

    status = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "300"})
    assert status.returncode == 1
    rows = {name: next(ln for ln in status.stdout.splitlines() if f" {name} " in ln) for name in ("postgres",
                                                                                              "airflow")}
    assert "down" in rows["postgres"] and "running, not answering" in rows["airflow"], status.stdout

    done = subprocess.run([*CLI, "stack", "up"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "postgres: starting" in done.stdout
    assert re.search(rf"airflow: running \(pid {airflow_pid}\) but not answering \(.+\); restarting it", done.stdout), \
        done.stdout
    assert "kafka: starting" not in done.stdout and Kafka(stack_settings).pid() == kafka_pid

    after = subprocess.run([*CLI, "stack", "status"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "300"})
    assert after.returncode == 0, after.stdout
    engine = create_engine(stack_settings.offsets_db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() >= 0
    finally:
        engine.dispose()

    (fp / "go").touch()  # the paused commit meets the restarted PostgreSQL: its staged rows are gone
    try:
        stream.communicate(timeout=300)
    finally:
        if stream.poll() is None:
            os.killpg(stream.pid, signal.SIGKILL)
    assert stream.returncode != 0, "the batch in flight cannot commit after the crash"
    # what committed before the crash, exactly once (a restart after a crash ends exactly once in the checker's
    # CRASH_* faults and test_table_contract's crash)
    engine = create_engine(stack_settings.offsets_db_url)
    try:
        with engine.connect() as conn:
            stands = dict(conn.execute(text("SELECT partition, next_offset FROM latest_offsets WHERE job = :j"),
                                       {"j": job}).all())
    finally:
        engine.dispose()
    assert 0 < sum(stands.values()) < 1200, stands
    assert_exactly_once(stack_settings.offsets_db_url, job, table, {p: stands.get(p, 0) for p in range(4)})

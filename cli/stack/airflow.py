"""Airflow standalone (API server, scheduler, DAG processor, triggerer) with its metadata in the stack's PostgreSQL.

Its log servers are off: Airflow 3.3 binds them to every interface with no setting to change that
(airflow/utils/serve_logs/core.py), and the API server reads task logs from the stack's own files anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from streamfill import REPO_ROOT
from streamfill.cli.stack.kafka import ensure_secrets
from streamfill.cli.stack.pidfile import cmdline, pid_alive
from streamfill.cli.stack.process import UMASK, children, spawn, wait_until
from streamfill.cli.stack.secret_file import ensure_secret, generate_password
from streamfill.cli.stack.service import ProcessGroupService, Status
from streamfill.errors import AirflowError
from streamfill.kafka_client import KAFKA_CONNECTION
from streamfill.orchestration.connections import (
    API_CONNECTION,
    SCHEMA_REGISTRY_CONNECTION,
    SPARK_CONNECT_CONNECTION,
    kafka_connection,
    postgres_connection,
    schema_registry_connection,
)
from streamfill.settings import AIRFLOW_USER as ADMIN
from streamfill.settings import Settings

COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
# the processes `airflow standalone` runs, as their command lines show them (the API server retitles itself)
PROCESSES = {"scheduler": ("scheduler",), "triggerer": ("triggerer",), "dag-processor": ("dag-processor",),
             "api-server": ("api-server", "api_server")}


def airflow_home(settings: Settings) -> Path:
    return settings.home / "airflow"


def wrapper_dir(settings: Settings) -> Path:
    """First on the PATH of `airflow standalone`, whose components it starts as plain `airflow <command>`."""
    return airflow_home(settings) / "bin"


def write_wrapper(settings: Settings) -> Path:
    """An `airflow` that starts the scheduler and the triggerer without their log servers."""
    script = wrapper_dir(settings) / "airflow"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n"
                      "# streamfill: Airflow's log servers would listen on every interface (cli/stack/airflow.py)\n"
                      'case "$1" in\n'
                      f'  scheduler|triggerer) exec "{airflow_bin()}" "$@" --skip-serve-logs ;;\n'
                      "esac\n"
                      f'exec "{airflow_bin()}" "$@"\n')
    script.chmod(0o755)
    return script


def airflow_env(settings: Settings) -> dict[str, str]:
    """The environment every Airflow process of the local stack runs with (CLI calls in tests included); the
    database password travels in it (SQL_ALCHEMY_CONN, the connection), never on a command line."""
    s = settings
    base = f"http://{s.host}:{s.airflow_port}"
    return {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home(s)),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(s.airflow_parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": s.airflow_db_url,
        "AIRFLOW__API__HOST": s.host,
        "AIRFLOW__API__PORT": str(s.airflow_port),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "30",
        "PATH": os.pathsep.join([str(wrapper_dir(s)), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "STREAMFILL_HOME": str(s.home),
        **connections(s),
    }


def kafka_client(settings: Settings) -> dict[str, str]:
    """The cluster Airflow's tasks use: the STREAMFILL_KAFKA_* settings when they name one, else the local
    broker's SASL_SSL listener as the jobs user, so every DAG of the stack runs with credentials as on a team's
    cluster (the PLAINTEXT listener serves the demo and the CLI)."""
    if settings.kafka_bootstrap_servers:
        return settings.kafka_client()
    ensure_secrets(settings)
    return settings.kafka_secured_client()


def connections(settings: Settings) -> dict[str, str]:
    """The Airflow connections and variable the DAGs use, as AIRFLOW_CONN_* / AIRFLOW_VAR_* (never in DAG code)."""
    return {"AIRFLOW_CONN_STREAMFILL_POSTGRES": json.dumps(postgres_connection(settings.offsets_db_url)),
            f"AIRFLOW_CONN_{KAFKA_CONNECTION.upper()}": json.dumps(kafka_connection(kafka_client(settings))),
            f"AIRFLOW_CONN_{SCHEMA_REGISTRY_CONNECTION.upper()}": json.dumps(
                schema_registry_connection(settings.schema_registry())),
            "AIRFLOW_VAR_STREAMFILL_SPARK_MASTER": settings.spark_master,
            f"AIRFLOW_CONN_{SPARK_CONNECT_CONNECTION.upper()}": json.dumps(
                {"conn_type": "spark_connect", "host": settings.host, "port": settings.spark_connect_port}),
            **api_connection(settings)}


def api_connection(settings: Settings) -> dict[str, str]:
    """The connection the replay form's access check asks Airflow's API with (orchestration/replay_access.py): the
    stack's own API as its admin. None before the stack made the admin's password (Airflow.prepare). The
    announcements of the streams' commits need none (orchestration/announce.py)."""
    if not settings.airflow_password_file.exists():
        return {}
    user, password = settings.airflow_login()
    return {f"AIRFLOW_CONN_{API_CONNECTION.upper()}": json.dumps(
        {"conn_type": "http", "host": f"http://{settings.host}:{settings.airflow_port}", "login": user,
         "password": password})}


def airflow_bin() -> str:
    """The `airflow` of this interpreter's environment, so the stack never picks up another install."""
    candidate = Path(sys.executable).parent / "airflow"
    return str(candidate) if candidate.exists() else (shutil.which("airflow") or "airflow")


def admin_password(settings: Settings) -> str:
    return settings.airflow_login()[1]


def reserialize(settings: Settings) -> None:
    """Parse the DAG files now: a new DAG file otherwise appears at the scheduler's next folder scan."""
    done = subprocess.run([airflow_bin(), "dags", "reserialize"], env=airflow_env(settings), capture_output=True,
                          text=True, timeout=600, umask=UMASK)
    if done.returncode != 0:
        raise AirflowError(f"airflow dags reserialize failed: {done.stderr[-2000:]}")


class Airflow(ProcessGroupService):
    name = "airflow"

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.airflow_port}"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.airflow_port, "STREAMFILL_AIRFLOW_PORT")]

    def command(self) -> list[str]:
        return [airflow_bin(), "standalone"]

    def signature(self) -> tuple[list[str], Path | None]:
        return self.command(), airflow_home(self.settings)

    def prepare(self) -> None:
        home = airflow_home(self.settings)
        home.mkdir(parents=True, exist_ok=True)
        # there before Airflow starts, so it neither generates one nor prints it into its log
        ensure_secret(self.settings.airflow_password_file, lambda: json.dumps({ADMIN: generate_password()}))
        write_wrapper(self.settings)

    def start(self) -> None:
        pid = spawn(self.command(), log=self.log, pid_file=self.pid_file, env=airflow_env(self.settings),
                    cwd=airflow_home(self.settings))
        wait_until(self.healthy, timeout=self.settings.start_timeout, service=self.name, log=self.log,
                   alive=lambda: pid_alive(pid))

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=3) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def stopped_processes(self, pid: int | None = None) -> list[str]:
        """Components whose process `airflow standalone` no longer has. It stays alive when they exit (after
        PostgreSQL went away, say), and the health endpoint trusts a heartbeat for 30 s after the last one."""
        pid = pid if pid is not None else self.pid()
        if pid is None:
            return list(PROCESSES)
        running = [{word for arg in cmdline(child) for word in arg.split()} for child in children(pid)]
        return [name for name, words in PROCESSES.items() if not any(set(words) & argv for argv in running)]

    def missing_connections(self, pid: int | None = None) -> list[str]:
        """The AIRFLOW_CONN_* / AIRFLOW_VAR_* this checkout gives Airflow that the running one was started without
        (a stack started by an older checkout): it is restarted to get them."""
        pid = pid if pid is not None else self.pid()
        try:
            started_with = {entry.split(b"=", 1)[0].decode() for entry in
                            Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry}
        except (OSError, TypeError):
            return []
        return sorted(set(connections(self.settings)) - started_with)

    def _problems(self, pid: int | None) -> tuple[list[str], list[str]]:
        """(processes gone or a start without this checkout's connections, components the health endpoint does
        not call healthy)"""
        h = self.health() or {}
        stale = self.missing_connections(pid)
        return (self.stopped_processes(pid) + [f"(started without {', '.join(stale)})"] * bool(stale),
                [c for c in COMPONENTS if (h.get(c) or {}).get("status") != "healthy"])

    def healthy(self) -> bool:
        return not any(self._problems(self.pid()))

    def broken(self) -> bool:
        return bool(self.stopped_processes() or self.missing_connections())

    def problem(self) -> str:
        if self.health() is None:
            return f"{self.url}/api/v2/monitor/health did not answer"
        gone, unhealthy = self._problems(self.pid())
        return "; ".join([f"processes gone: {', '.join(gone)}"] * bool(gone)
                         + [f"not healthy: {', '.join(unhealthy)}"] * bool(unhealthy)) or "healthy again"

    def status(self) -> Status:
        pid = self.pid()
        login = f"login {ADMIN} at {self.url}, password in {self.settings.airflow_password_file}"
        gone, unhealthy = self._problems(pid) if pid is not None else ([], [])
        if gone:
            login += f"; processes gone: {', '.join(gone)}"
        if unhealthy:
            login += f"; not healthy: {', '.join(unhealthy)}"
        return Status(self.name, self.url, pid, pid is not None, pid is not None and not (gone or unhealthy),
                      self.log, login)


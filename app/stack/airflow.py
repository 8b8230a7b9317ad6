"""Airflow standalone (API server, scheduler, DAG processor, triggerer) with its metadata in the stack's PostgreSQL."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from sqlalchemy import make_url

from app.stack.pidfile import pid_alive
from app.stack.process import read_pid, spawn, wait_until
from app.stack.service import ProcessGroupService, Status
from streamfill import REPO_ROOT
from streamfill.errors import AirflowError
from streamfill.settings import AIRFLOW_USER as ADMIN
from streamfill.settings import Settings

COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def airflow_home(settings: Settings) -> Path:
    return settings.home / "airflow"


def airflow_env(settings: Settings) -> dict[str, str]:
    """The environment every Airflow process of the local stack runs with (CLI calls in tests included)."""
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
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(s.airflow_worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(s.airflow_triggerer_log_port),
        "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "30",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "STREAMFILL_HOME": str(s.home),
        **connections(s),
    }


def connections(settings: Settings) -> dict[str, str]:
    """The Airflow connections and variable the DAGs use, as AIRFLOW_CONN_* / AIRFLOW_VAR_* (never in DAG code)."""
    db = make_url(settings.offsets_db_url)
    pg = {"conn_type": "postgres", "host": db.host, "port": db.port or 5432, "schema": db.database,
          "login": db.username, "password": db.password}
    kafka = {"conn_type": "generic", "extra": {"bootstrap_servers": settings.bootstrap_servers}}
    return {"AIRFLOW_CONN_STREAMFILL_POSTGRES": json.dumps({k: v for k, v in pg.items() if v is not None}),
            "AIRFLOW_CONN_STREAMFILL_KAFKA": json.dumps(kafka),
            "AIRFLOW_VAR_STREAMFILL_SPARK_MASTER": settings.spark_master}


def airflow_bin() -> str:
    """The `airflow` of this interpreter's environment, so the stack never picks up another install."""
    candidate = Path(sys.executable).parent / "airflow"
    return str(candidate) if candidate.exists() else (shutil.which("airflow") or "airflow")


def admin_password(settings: Settings) -> str:
    return settings.airflow_login()[1]


def reserialize(settings: Settings) -> None:
    """Parse the DAG files now: a new DAG file otherwise appears at the scheduler's next folder scan."""
    done = subprocess.run([airflow_bin(), "dags", "reserialize"], env=airflow_env(settings), capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise AirflowError(f"airflow dags reserialize failed: {done.stderr[-2000:]}")


class Airflow(ProcessGroupService):
    name = "airflow"

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.airflow_port}"

    def ports(self) -> list[tuple[int, str]]:
        s = self.settings
        return [(s.airflow_port, "STREAMFILL_AIRFLOW_PORT"),
                (s.airflow_worker_log_port, "STREAMFILL_AIRFLOW_WORKER_LOG_PORT"),
                (s.airflow_triggerer_log_port, "STREAMFILL_AIRFLOW_TRIGGERER_LOG_PORT")]

    def command(self) -> list[str]:
        return [airflow_bin(), "standalone"]

    def signature(self) -> tuple[list[str], Path | None]:
        return self.command(), airflow_home(self.settings)

    def prepare(self) -> None:
        home = airflow_home(self.settings)
        home.mkdir(parents=True, exist_ok=True)
        passwords = self.settings.airflow_password_file
        if not passwords.exists():
            passwords.write_text(json.dumps({ADMIN: secrets.token_urlsafe(12)}))
            passwords.chmod(0o600)

    def start(self) -> None:
        pid = spawn(self.command(), log=self.log, pid_file=self.pid_file,
                    env=airflow_env(self.settings), cwd=airflow_home(self.settings))
        wait_until(self.healthy, timeout=self.settings.start_timeout, service=self.name, log=self.log,
                   alive=lambda: pid_alive(pid))

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=3) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    @staticmethod
    def _unhealthy(h: dict | None) -> list[str]:
        return [c for c in COMPONENTS if ((h or {}).get(c) or {}).get("status") != "healthy"]

    def healthy(self) -> bool:
        return not self._unhealthy(self.health())

    def status(self) -> Status:
        running = self.running()
        try:
            login = f"login {ADMIN} / {admin_password(self.settings)} at {self.url}"
        except (OSError, KeyError, ValueError):
            login = "not set up yet"
        unhealthy = self._unhealthy(self.health()) if running else list(COMPONENTS)
        if running and unhealthy:
            login += f"; not healthy: {', '.join(unhealthy)}"
        return Status(self.name, self.url, read_pid(self.pid_file) if running else None, running,
                      not unhealthy, self.log, login)


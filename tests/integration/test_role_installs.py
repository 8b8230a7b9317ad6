"""streamfill installed by role, as docs/requirements.md tells a team: the project's wheel (built in a clone without
tags) into one fresh venv, role after role, with constraints.txt's versions. The core alone (`pip install
streamfill`: no Airflow, no PySpark) imports its layers and what Spark's executors run (with PySpark on the path
the way a cluster gives it), runs its CLI against the stack's Kafka and PostgreSQL and names the extra of every role
it lacks; with the Spark role beside it, the Airflow-free install runs `streamfill backfill` into the stack's
PostgreSQL, and the Airflow side still names its extra. Then `make release` of that clone, tagged, builds and
checks the sdist and the wheel. One venv, one cold Spark launch; the install times are printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import venv
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import text

from streamfill import REPO_ROOT, extras
from streamfill.version import development, read_top
from tests.existing_airflow import tagless_clone, wheel_version
from tests.job_helpers import orders_columns
from tests.shared_run import OWN_AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(OWN_AIRFLOW_GROUP)]

# the core's layers (tests/unit/test_layers.py): every module of them imports with the core's packages alone
CORE_LAYERS = ("streamfill", "connectors/kafka", "offsets_db", "cli/commands")
# what the core (the Airflow side's hosts and Spark's executors among them) must not bring
HEAVY = {"apache-airflow", "great-expectations", "plotly", "openlineage-python", "pandas", "pyspark"}

IMPORT_CHECK = textwrap.dedent("""
    import importlib, json, sys
    failed = {}
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(failed))
""")


def core_modules() -> list[str]:
    names = ["streamfill.cli.main", "streamfill.spark_jobs.pipelines"]
    for folder in CORE_LAYERS:
        prefix = "streamfill" if folder == "streamfill" else "streamfill." + folder.replace("/", ".")
        names += [f"{prefix}.{p.stem}" for p in sorted((REPO_ROOT / folder).glob("*.py")) if p.stem != "__init__"]
    return names


class RoleVenv:
    """One venv the roles are installed into one after another, and its commands with the stack's settings."""

    def __init__(self, root: Path, wheel: Path, env: dict[str, str]) -> None:
        venv.EnvBuilder(with_pip=False).create(root)
        self.bin, self.wheel, self.timings = root / "bin", wheel, {}
        self.env = {**env, "PATH": os.pathsep.join([str(self.bin), *env.get("PATH", "").split(os.pathsep)])}

    def install(self, extra: str | None) -> None:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.bin / "python"), "install", "-q",
                               "-c", str(REPO_ROOT / "constraints.txt"),
                               f"{self.wheel}[{extra}]" if extra else str(self.wheel)],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        self.timings[extra or "core"] = round(time.monotonic() - started, 1)

    def installed(self) -> set[str]:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.bin / "python"), "list",
                               "--format", "json"], capture_output=True, text=True, check=True, timeout=120)
        return {p["name"].lower() for p in json.loads(done.stdout)}

    def run(self, *argv: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / argv[0]), *argv[1:]], env={**self.env, **(env or {})},
                              cwd=self.bin.parent, capture_output=True, text=True, timeout=timeout)

    def imports(self, modules: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
        done = self.run("python", "-c", IMPORT_CHECK, *modules, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def pyspark_of_the_cluster(dest: Path) -> Path:
    """A folder holding only PySpark's own packages (this environment's), as a cluster's Spark puts them on its
    executors' PYTHONPATH (python/lib/pyspark.zip and py4j's zip) without pip."""
    import py4j
    import pyspark

    dest.mkdir()
    for package in (pyspark, py4j):
        (dest / package.__name__).symlink_to(Path(package.__file__).parent)
    return dest


def test_each_role_installs_alone_and_the_airflow_free_install_runs_a_backfill(stack_settings, project_wheel,
                                                                               topic_name, db, tmp_path):
    version = wheel_version(project_wheel)
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(f"jobs:\n  {topic_name}:\n    topic: {topic_name}\n    table: {topic_name}\n"
                         + orders_columns(4))
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # the stack's home names its addresses and certificates (an installed wheel's default home is ~/.streamfill)
    roles = RoleVenv(tmp_path / "venv", project_wheel, {**inherited, "STREAMFILL_HOME": str(stack_settings.home),
                                                        "STREAMFILL_JOBS_FILE": str(jobs_file)})

    # the core: `pip install streamfill`
    roles.install(None)
    assert not roles.installed() & HEAVY, roles.installed() & HEAVY
    assert roles.imports(core_modules()) == {}
    # the wheel of a clone without tags: the CHANGELOG's version being made, as a development release
    clone = project_wheel.parent.parent / "source"
    commits = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=clone, capture_output=True, text=True,
                             check=True).stdout.strip()
    assert version.startswith(f"{development(read_top(REPO_ROOT), int(commits))}+g"), version
    shown = roles.run("streamfill", "--version")
    assert shown.returncode == 0 and shown.stdout.strip() == version, shown.stdout + shown.stderr
    checked = roles.run("streamfill", "jobs", "check")
    assert checked.returncode == 0 and "1 job(s) valid" in checked.stdout, checked.stdout + checked.stderr
    assert "pip install 'streamfill[quality]' checks them" in checked.stdout  # its quality: list, unchecked
    produced = roles.run("streamfill", "produce", "--topic", topic_name, "--count", "500")
    assert produced.returncode == 0 and "500 valid" in produced.stdout, produced.stdout + produced.stderr
    upgraded = roles.run("streamfill", "db", "upgrade")
    assert upgraded.returncode == 0 and "at revision head" in upgraded.stdout, upgraded.stdout + upgraded.stderr
    for argv, extra in ((("backfill", "--job", topic_name, "--from", "earliest", "--to", "latest"), extras.SPARK),
                        (("quality", "--job", topic_name), extras.QUALITY), (("stack", "status"), extras.ALL)):
        refused = roles.run("streamfill", *argv)
        assert refused.returncode != 0 and f"pip install 'streamfill[{extra}]'" in refused.stderr, \
            refused.stdout + refused.stderr
    airflow_side = roles.imports(["streamfill.orchestration"])
    assert "pip install 'streamfill[airflow]'" in airflow_side["streamfill.orchestration"], airflow_side
    # Spark's executors run the core: their tasks' modules import with it and the cluster's PySpark
    cluster = {"PYTHONPATH": str(pyspark_of_the_cluster(tmp_path / "cluster-pyspark"))}
    assert roles.imports(["streamfill.connectors.spark.source", "streamfill.connectors.spark.kafka_sink",
                          "streamfill.connectors.spark.postgres_sink", "streamfill.spark_jobs.pipelines.avro",
                          "streamfill.spark_jobs.pipelines.change_batches"], env=cluster) == {}

    # the Airflow-free install: the core and the Spark role
    roles.install(extras.SPARK)
    assert not roles.installed() & {"apache-airflow", "great-expectations", "plotly"}
    started = time.monotonic()
    backfill = roles.run("streamfill", "backfill", "--job", topic_name, "--from", "earliest", "--to", "latest",
                         timeout=900)
    roles.timings["backfill"] = round(time.monotonic() - started, 1)
    assert backfill.returncode == 0, backfill.stdout[-3000:] + backfill.stderr[-3000:]
    assert "500 rows, 0 dead letters" in backfill.stdout, backfill.stdout[-3000:]
    with db.connect() as conn:
        assert conn.scalar(text(f'SELECT count(DISTINCT "offset") FROM "{topic_name}"')) == 500
    airflow_side = roles.imports(["streamfill.orchestration"])
    assert "pip install 'streamfill[airflow]'" in airflow_side["streamfill.orchestration"], airflow_side
    print(f"role installs into one venv (s): {roles.timings}")


def test_make_release_of_a_tagged_commit_builds_and_checks_the_sdist_and_the_wheel(tmp_path):
    """The release of a clone whose CHANGELOG's top section is dated and whose commit is tagged with its version."""
    clone = tagless_clone(tmp_path / "clone")
    top = read_top(REPO_ROOT)
    changelog = clone / "CHANGELOG.md"
    changelog.write_text(re.sub(r"^## .*$", f"## {top.version} - 2026-12-08", changelog.read_text(), count=1,
                                flags=re.M))
    git = ["git", "-c", "user.name=release test", "-c", "user.email=release@example.com"]
    for step in (["add", "-A"], ["commit", "-q", "-m", f"release {top.version}"], ["tag", f"v{top.version}"]):
        subprocess.run([*git, *step], cwd=clone, check=True, capture_output=True, timeout=60)
    started = time.monotonic()
    done = subprocess.run(["make", "-o", "install", "release", f"VENV={Path(sys.executable).parent.parent}"],
                          cwd=clone, capture_output=True, text=True, timeout=600)
    print(f"make release: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    built = sorted(p.name for p in (clone / "dist").iterdir())
    assert built == [f"streamfill-{top.version}-py3-none-any.whl", f"streamfill-{top.version}.tar.gz"]
    assert done.stdout.count("PASSED") == 2  # twine check, each file
    # the wheel was built from the sdist: what the sdist holds is enough to number and build it
    names = zipfile.ZipFile(clone / "dist" / built[0]).namelist()
    assert f"streamfill-{top.version}.dist-info/METADATA" in names and "streamfill/version.py" in names

"""The roles (streamfill/extras.py): each is an extra of pyproject.toml, and a part of streamfill imported or run
where its role's packages are missing stops naming the extra to install. The installs themselves:
tests/integration/test_role_installs.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from streamfill import REPO_ROOT, extras
from streamfill.errors import MissingExtra
from tests.packaging import pyproject

pytestmark = pytest.mark.unit

# runs argv[2:] as `python -c` would, with the top-level modules named in argv[1] (comma-separated) not installed
WITHOUT = textwrap.dedent("""
    import importlib.abc, sys
    hidden = set(sys.argv[1].split(","))

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in hidden:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    sys.argv = sys.argv[2:]
    exec(sys.argv[0])
""")


def without(hidden: tuple[str, ...], code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, ",".join(hidden), code, *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT)


def test_every_role_is_an_extra_of_the_distribution():
    declared = set(pyproject()["project"]["optional-dependencies"]) - {"dev"}
    assert set(extras.MODULES) == declared


def test_a_missing_module_names_the_part_the_modules_and_the_extra(monkeypatch):
    monkeypatch.setitem(extras.MODULES, extras.QUALITY, ("json", "no_such_module_here", "nor.this_one"))
    with pytest.raises(MissingExtra) as raised:
        extras.require(extras.QUALITY, "the thing imported")
    message = str(raised.value)
    assert message.startswith("the thing imported needs the role `quality`")
    assert "no_such_module_here, nor.this_one are not installed" in message and "json" not in message
    assert "pip install 'streamfill[quality]'" in message
    assert isinstance(raised.value, ImportError)  # what an import's caller (Airflow's plugin loader) catches
    extras.require(extras.SPARK, "the Spark side")  # installed here: nothing raised


def test_the_airflow_side_without_airflow_names_its_extra():
    done = without(("airflow",), "import streamfill.orchestration.dags")
    assert done.returncode != 0
    assert "MissingExtra: streamfill.orchestration (the Airflow side" in done.stderr
    assert "pip install 'streamfill[airflow]'" in done.stderr


def test_the_cli_runs_without_airflow_pyspark_and_great_expectations_and_names_the_extra_a_command_needs():
    cli = "from streamfill.cli.main import app; app(prog_name='streamfill')"
    hidden = ("airflow", "pyspark", "py4j", "great_expectations", "openlineage", "plotly")
    shown = without(hidden, cli, "--help")
    assert shown.returncode == 0, shown.stderr
    for argv, extra in ((["backfill", "--job", "orders", "--from", "earliest", "--to", "latest"], extras.SPARK),
                        (["stream", "--job", "orders"], extras.SPARK), (["quality", "--job", "orders"], extras.QUALITY),
                        (["stack", "status"], extras.ALL), (["demo", "--count", "10"], extras.ALL)):
        refused = without(hidden, cli, *argv)
        assert refused.returncode != 0 and f"pip install 'streamfill[{extra}]'" in refused.stderr, \
            (argv, refused.stdout, refused.stderr)
        assert "Traceback" not in refused.stderr

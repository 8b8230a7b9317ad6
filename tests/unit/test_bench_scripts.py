"""The benchmarks start as the README runs them (`.venv/bin/python bench/NAME.py`): as scripts, whose own
folder comes first on sys.path, so no bench file may hide a project package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamfill import REPO_ROOT

pytestmark = pytest.mark.unit

SCRIPTS = sorted(p.name for p in (REPO_ROOT / "bench").glob("*.py"))


def test_no_bench_file_is_named_like_a_project_package():
    packages = {p.name for p in REPO_ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert SCRIPTS and not {s.removesuffix(".py") for s in SCRIPTS} & packages


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_starts_as_a_script(script):
    done = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout

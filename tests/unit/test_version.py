"""The version (streamfill/version.py): CHANGELOG.md's top section names the version being made, a clone without
tags builds it as a development release (not 0.0.1.devN), `streamfill --version` prints the installed version, and
`make release` refuses a build the CHANGELOG does not name, building nothing."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamfill import REPO_ROOT
from streamfill.cli.main import app
from streamfill.version import CHANGELOG, Section, build_version, development, read_top, release_refusal, top_section
from tests.existing_airflow import tagless_clone

pytestmark = pytest.mark.unit

MADE = "# Changelog\n\nWhat changed.\n\n## 0.2.0 (unreleased)\n\n- a change\n\n## 0.1.0\n\n- the first\n"
RELEASED = MADE.replace("## 0.2.0 (unreleased)", "## 0.2.0 - 2026-12-08")


def test_the_top_section_names_the_version_and_a_build_between_releases_is_its_development_release():
    assert top_section(MADE) == Section("0.2.0", None)
    assert top_section(RELEASED) == Section("0.2.0", date(2026, 12, 8))
    assert development(top_section(MADE), 208) == "0.2.0.dev208"
    assert development(top_section(RELEASED), 3) == "0.2.1.dev3"  # after a release: the next patch's
    for heading in ("## Unreleased", "## 0.2.0", "## 0.2 (unreleased)", "## 0.2.0 - tomorrow"):
        with pytest.raises(ValueError, match="names no version") as raised:
            top_section(MADE.replace("## 0.2.0 (unreleased)", heading))
        assert heading in str(raised.value) and "## X.Y.Z (unreleased)" in str(raised.value)


def test_the_changelog_names_the_version_being_made():
    top = read_top(REPO_ROOT)
    assert re.fullmatch(r"\d+\.\d+\.\d+", top.version)


def test_a_clone_without_tags_builds_the_changelogs_version_as_a_development_release(tmp_path):
    clone = tagless_clone(tmp_path / "clone")
    assert subprocess.run(["git", "tag"], cwd=clone, capture_output=True, text=True, check=True).stdout == ""
    commits = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=clone, capture_output=True, text=True,
                             check=True).stdout.strip()
    version = build_version(clone)
    expected = development(read_top(REPO_ROOT), int(commits))  # 0.2.0.dev208, say; setuptools-scm alone: 0.0.1.dev208
    assert re.fullmatch(rf"{re.escape(expected)}\+g[0-9a-f]+(\.d\d{{8}})?", version), version


def test_streamfill_version_prints_the_installed_version_whatever_the_settings(monkeypatch):
    monkeypatch.setenv("STREAMFILL_PG_PORT", "not a port")  # every other command stops at this setting
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == importlib.metadata.version("streamfill")


def test_a_release_is_refused_unless_the_changelogs_dated_top_section_names_the_build():
    assert release_refusal("0.2.0", RELEASED) is None
    unreleased = release_refusal("0.2.0", MADE)
    assert "`## 0.2.0 (unreleased)` is not released" in unreleased and "tag the commit v0.2.0" in unreleased
    development_build = release_refusal("0.2.0.dev3+g1234abc", RELEASED)
    assert "0.2.0.dev3+g1234abc, a development release" in development_build and "v0.2.0" in development_build
    other = release_refusal("0.1.9", RELEASED)
    assert "0.1.9" in other and "names 0.2.0" in other


def test_make_release_in_a_clone_without_tags_refuses_and_builds_nothing(tmp_path):
    clone = tagless_clone(tmp_path / "clone")
    # this environment's tools (`-o install`: no venv of the clone's own)
    venv = Path(sys.executable).parent.parent
    done = subprocess.run(["make", "-o", "install", "release", f"VENV={venv}"], cwd=clone, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    top = read_top(REPO_ROOT)
    if top.released is None:
        assert f"{CHANGELOG}'s top section `## {top.version} (unreleased)` is not released" in done.stderr
    else:
        assert "a development release" in done.stderr, done.stderr
    assert not (clone / "dist").exists()

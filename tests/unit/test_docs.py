"""The documentation: the site builds with MkDocs in strict mode (a broken link, a missing anchor or a page left
out of the navigation fails), and the README stays a short first read whose links lead somewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamfill import REPO_ROOT

pytestmark = pytest.mark.unit


def test_the_site_builds_strictly_with_every_page_in_its_navigation(tmp_path):
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = {p.stem for p in (REPO_ROOT / "docs").glob("*.md")}
    site = tmp_path / "site"
    built = {p.parent.name if p.parent != site else "index" for p in site.glob("**/index.html")}
    assert pages <= built, pages - built


def test_the_readme_is_a_short_first_read_and_its_links_exist():
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make demo" in text and "make test" in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (REPO_ROOT / target).exists(), target

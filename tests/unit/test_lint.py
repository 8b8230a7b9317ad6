"""The code passes ruff as pyproject.toml configures it (pyflakes, pycodestyle, import order, bugbear, pyupgrade):
a `noqa` left in the code names its rule and says why."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamfill import REPO_ROOT

pytestmark = pytest.mark.unit

RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_finds_nothing():
    done = subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_each_noqa_names_its_rule_and_a_reason():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    bare = []
    for rel in (rel for rel in tracked if (REPO_ROOT / rel).is_file()):  # a file deleted but not yet committed
        for number, line in enumerate((REPO_ROOT / rel).read_text().splitlines(), 1):
            found = re.search(r"#\s*noqa\b(.*)$", line)
            if found and not re.match(r":\s*[A-Z]+\d+(,\s*[A-Z]+\d+)*\s+\S", found.group(1)):
                bare.append(f"{rel}:{number}: {line.strip()}")
    assert not bare, "a noqa names its rule and says why (`# noqa: E402  reason`):\n" + "\n".join(bare)

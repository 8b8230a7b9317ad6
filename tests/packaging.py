"""pyproject.toml as data, for the tests of what the project installs."""

from __future__ import annotations

import tomllib

from streamfill import REPO_ROOT


def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())

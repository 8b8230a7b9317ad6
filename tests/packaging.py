"""pyproject.toml as data, for the tests of what the project installs (Python 3.10 has no tomllib)."""

from __future__ import annotations

import sys

from streamfill import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())

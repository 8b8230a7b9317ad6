"""setuptools' one setting pyproject.toml cannot hold: the version, numbered by setuptools-scm from the git tags
with CHANGELOG.md's top section for every commit that is not a release (streamfill/version.py), so a clone
without tags builds 0.2.0.devN rather than 0.0.1.devN. Everything else is in pyproject.toml."""

import importlib.util
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# by its path: the build environment has setuptools and setuptools-scm, not streamfill
_spec = importlib.util.spec_from_file_location("_streamfill_version", ROOT / "streamfill" / "version.py")
_version = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(_version)

setup(use_scm_version=_version.scm_settings(ROOT))

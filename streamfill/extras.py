"""The roles streamfill installs as, each an extra of the distribution (pyproject.toml's optional dependencies,
docs/requirements.md), and the check a role's code makes first: an install without that role fails at the import
with the extra to install named, not with a third-party module's name.

`pip install streamfill` is the core (the Kafka core, offsets_db, the jobs file's checks, the CLI's `db`,
`offsets`, `jobs` and `produce`, and what Spark's executors run); `spark` adds a job's driver, `quality` the quality
suites, `airflow` the Airflow side, `all` every role and the local stack.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

from streamfill.errors import MissingExtra

SPARK, QUALITY, AIRFLOW, ALL = "spark", "quality", "airflow", "all"
# what each role's code imports first: the modules the check looks for
MODULES = {
    SPARK: ("pyspark",),
    QUALITY: ("great_expectations", "openlineage"),
    AIRFLOW: ("airflow", "airflow.providers.postgres"),
    ALL: ("airflow", "pyspark", "great_expectations", "cryptography"),
}


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` this interpreter cannot import (a submodule whose package is missing included)."""
    gone = []
    for name in modules:
        try:
            found = find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            gone.append(name)
    return gone


def require(extra: str, part: str) -> None:
    """MissingExtra naming `part` (what was imported), the modules not installed and the extra that installs them,
    unless every module of `extra` is installed."""
    gone = missing(MODULES[extra])
    if gone:
        raise MissingExtra(f"{part} needs the role `{extra}` of streamfill, and {', '.join(gone)} "
                           f"{'is' if len(gone) == 1 else 'are'} not installed in {sys.prefix}: "
                           f"pip install 'streamfill[{extra}]' (the same version as the streamfill installed)")

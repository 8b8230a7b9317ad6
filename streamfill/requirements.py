"""The versions streamfill runs against, stated once: docs/requirements.md shows them with the matrix as tested,
and a launch refuses a PostgreSQL, Spark or Java outside them, naming what it found and what it needs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from streamfill.errors import REFUSAL, StreamfillError

MIN_POSTGRES = 14  # date_bin: the streamfill page's time buckets
MIN_SPARK, MAX_SPARK = (4, 3), (5, 0)  # as pyproject.toml's pyspark range: the Spark the reader is tested on
MIN_JAVA = 17  # Spark 4's minimum


class UnsupportedVersion(StreamfillError):
    """A dependency's version outside what streamfill runs against."""

    kind = REFUSAL


def postgres(server_version_num: int, where: str) -> None:
    """`SHOW server_version_num` of the database at `where` (a host:port and database, no password)."""
    major = server_version_num // 10000
    if major < MIN_POSTGRES:
        raise UnsupportedVersion(f"PostgreSQL {major} at {where}: streamfill needs PostgreSQL {MIN_POSTGRES} or "
                                 "later (docs/requirements.md); upgrade the server or point STREAMFILL_DB_URL "
                                 "and the connection streamfill_postgres at one")


def spark(version: str) -> None:
    """The Spark version a session reports (spark.version): the cluster's, which may differ from PySpark's."""
    found = _numbers(version, 2)
    if not (MIN_SPARK <= found < MAX_SPARK):
        raise UnsupportedVersion(f"Spark {version}: streamfill needs Spark {_shown(MIN_SPARK)} or a later 4.x "
                                 "(docs/requirements.md), the same version as the PySpark installed beside it; use "
                                 "a cluster of that version or a local master")


def java(version_output: str, java_bin: str) -> None:
    """`java -version`'s output of the JVM a launch would start."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not found:
        raise UnsupportedVersion(f"{java_bin} -version printed no version ({version_output.strip()[:200]!r}): "
                                 f"Spark needs Java {MIN_JAVA} or later; set JAVA_HOME to such a JDK")
    major = int(found[2]) if found[1] == "1" else int(found[1])  # Java 8 and older say 1.8
    if major < MIN_JAVA:
        raise UnsupportedVersion(f"Java {major} at {java_bin}: Spark 4 needs Java {MIN_JAVA} or later "
                                 "(docs/requirements.md); set JAVA_HOME to such a JDK")


@lru_cache(maxsize=1)
def check_java() -> None:
    """The Java a launch would start (JAVA_HOME's, else the PATH's), as Spark's scripts choose it, checked once."""
    home = os.environ.get("JAVA_HOME")
    java_bin = str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")
    try:
        done = subprocess.run([java_bin, "-version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise UnsupportedVersion(f"no Java at {java_bin} ({exc.strerror}): Spark needs Java {MIN_JAVA} or later; "
                                 "install it or set JAVA_HOME") from None
    java(done.stderr + done.stdout, java_bin)


def _numbers(version: str, count: int) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:count]]
    return tuple(parts + [0] * (count - len(parts)))


def _shown(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))

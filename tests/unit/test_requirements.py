"""A launch refuses a PostgreSQL, Spark or Java older than streamfill needs, naming what it found and what it
needs (streamfill/requirements.py); the versions of this machine pass."""

from __future__ import annotations

import pytest

from streamfill import requirements
from streamfill.requirements import UnsupportedVersion

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("call, words", [
    (lambda: requirements.postgres(130011, "db:5432/streamfill"), ["PostgreSQL 13 at db:5432/streamfill", "14"]),
    (lambda: requirements.spark("3.5.1"), ["Spark 3.5.1", "4.3"]),
    (lambda: requirements.spark("5.0.0"), ["Spark 5.0.0", "a later 4.x"]),
    (lambda: requirements.java('openjdk version "11.0.21" 2023-10-17', "/usr/bin/java"),
     ["Java 11 at /usr/bin/java", "Java 17 or later", "JAVA_HOME"]),
    (lambda: requirements.java('java version "1.8.0_392"', "/opt/jdk8/bin/java"), ["Java 8 at /opt/jdk8/bin/java"]),
])
def test_an_old_version_is_refused_naming_what_was_found_and_what_is_needed(call, words):
    with pytest.raises(UnsupportedVersion) as raised:
        call()
    for word in words:
        assert word in str(raised.value)


def test_the_supported_versions_pass():
    requirements.postgres(150004, "db")
    requirements.postgres(180000, "db")
    requirements.spark("4.3.0")
    requirements.java('openjdk version "17.0.13" 2024-10-15', "java")
    requirements.java('openjdk version "21" 2023-09-19', "java")
    requirements.check_java()  # this machine's


def test_a_missing_java_is_named(monkeypatch, tmp_path):
    requirements.check_java.cache_clear()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojdk"))
    try:
        with pytest.raises(UnsupportedVersion, match=f"no Java at {tmp_path}/nojdk/bin/java"):
            requirements.check_java()
    finally:
        requirements.check_java.cache_clear()

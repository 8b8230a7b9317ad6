"""A class-data-sharing archive of the classes a Spark driver loads as it starts (the JDK's dynamic CDS archive):
a launch's JVM maps them from the archive instead of reading, parsing and verifying them from Spark's jars.

`streamfill stack up` builds it once for each Java and PySpark install (run as a script, this file is the
warm-up the archive records). Launches pass it through SPARK_SUBMIT_OPTS, which spark-submit adds to the
driver's JVM options beside the user's own. A launch without the archive, or whose JVM or class path does not
match it, starts as before: the JVM falls back to loading the classes itself, without a word.

    spark-submit --driver-java-options -XX:ArchiveClassesAtExit=A.jsa spark_jobs/class_archive.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

OPTIONS_ENV = "SPARK_SUBMIT_OPTS"
# a JVM that cannot use the archive says so on stdout; the launch is the same without it
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def java_binary() -> Path | None:
    """The java spark-submit runs: JAVA_HOME's, else the one on PATH (as bin/spark-class chooses)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found and Path(found).exists() else None


def archive_path(home: Path) -> Path | None:
    """Where the archive for this Java and this PySpark lives under `home` (None without java or PySpark): the
    name carries a digest of the JVM's build and PySpark's jars, so an upgrade of either makes a new one."""
    import importlib.util

    java = java_binary()
    spec = importlib.util.find_spec("pyspark")
    if java is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    release = java.parents[1] / "release"
    digest = hashlib.sha256()
    digest.update(str(java).encode())
    digest.update(release.read_bytes() if release.is_file() else b"")
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else []:
        digest.update(jar.name.encode())
    return home / "spark" / f"driver-classes-{digest.hexdigest()[:16]}.jsa"


def java_options(home: Path) -> list[str]:
    """The driver JVM's options that map the archive, or none while there is no archive."""
    path = archive_path(home)
    return [f"-XX:SharedArchiveFile={path}", *QUIET] if path is not None and path.is_file() else []


def with_archive(env: dict[str, str], home: Path) -> dict[str, str]:
    """`env` with the archive's options added to SPARK_SUBMIT_OPTS (kept as they are when they name one)."""
    current = env.get(OPTIONS_ENV, "")
    options = java_options(home)
    if not options or "SharedArchiveFile" in current:
        return env
    return {**env, OPTIONS_ENV: " ".join([current, *options]).strip()}


def build(home: Path, timeout_s: float = 600) -> tuple[Path | None, str]:
    """Make the archive unless it exists: one spark-submit of this file, the archive written as its JVM exits
    (to a temporary name first, so no launch maps half an archive). Returns the archive (None when it could not
    be made) and a line saying what happened."""
    path = archive_path(home)
    if path is None:
        return None, "no java or PySpark: launches start without a class archive"
    if path.is_file():
        return path, f"class archive {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop(OPTIONS_ENV, None)
    try:
        done = subprocess.run([str(submit) if submit.exists() else "spark-submit", "--master", "local[1]",
                               "--driver-java-options", f"-XX:ArchiveClassesAtExit={partial}", __file__],
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        partial.unlink(missing_ok=True)
        return None, f"no class archive ({exc}); launches start without it"
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"no class archive (spark-submit exited {done.returncode}: {tail[0]}); launches start " \
                     "without it"
    os.replace(partial, path)
    return path, f"class archive built: {path}"


def _warm_up() -> None:
    """What a job's driver does first: a session, a query planned and run, a streaming query started and
    stopped, a Python data source registered, so the archive holds the classes those load."""
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceReader
    from pyspark.sql.types import StructType

    class Warm(DataSource):
        @classmethod
        def name(cls) -> str:
            return "streamfill_warm_up"

        def schema(self) -> str:
            return "n int"

        def reader(self, schema: StructType) -> DataSourceReader:
            return WarmReader()

    class WarmReader(DataSourceReader):
        def read(self, partition):
            yield (1,)

    spark = (SparkSession.builder.appName("streamfill-class-archive").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.dataSource.register(Warm)
    spark.read.format("streamfill_warm_up").load().selectExpr("n + 1 AS m").groupBy("m").count().collect()
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    _warm_up()

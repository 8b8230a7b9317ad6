"""Spark: local mode by default, so nothing to start; health means a JVM and this interpreter's PySpark."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

from streamfill.cli.stack.service import Service, Status
from streamfill.errors import StackError


class Spark(Service):
    name = "spark"

    def ports(self) -> list[tuple[int, str]]:
        return []

    def running(self) -> bool:
        return True

    def start(self) -> None:
        """Nothing to start; fails naming what is missing."""
        if shutil.which("java") is None:
            raise StackError("spark: no `java` on PATH; `streamfill stack up` installs it with Kafka, or run "
                             "`apt-get install -y default-jre-headless`")
        if not self.healthy():
            raise StackError(f"spark: PySpark is not importable by {sys.executable} or `java -version` fails; "
                             "run `make install`")

    def prepare(self) -> str:
        """The driver's class archive, built the first time: each launch's JVM then starts faster. Says what it
        did; a failure leaves launches as they were."""
        from streamfill.spark_jobs import class_archive

        return class_archive.build(self.settings.home)[1]

    def stop(self) -> None:
        pass

    def healthy(self) -> bool:
        java = shutil.which("java")
        if java is None:
            return False
        if importlib.util.find_spec("pyspark") is None:
            return False
        return subprocess.run([java, "-version"], capture_output=True).returncode == 0

    def status(self) -> Status:
        try:
            import pyspark

            version = pyspark.__version__
        except ImportError:
            version = "missing"
        return Status(self.name, self.settings.spark_master, None, True, self.healthy(), self.log,
                      f"PySpark {version}, PYSPARK_PYTHON={sys.executable}")

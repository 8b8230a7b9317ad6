"""Spark Connect: the local stack's Spark server, where a stream's driver runs detached from whatever launched it
(an Airflow task, a terminal). Spark's own server class from PySpark's jars, started by spark-submit, with this
interpreter as its Python workers' (they import streamfill's data sources), a local master and sessions that never
time out (an idle session's timeout would stop the detached queries it holds)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

from streamfill.cli.stack.pidfile import cmdline, pid_alive, write_record
from streamfill.cli.stack.process import spawn, wait_until
from streamfill.cli.stack.service import ProcessGroupService, Status
from streamfill.errors import StackError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DRIVER_MEMORY = "1g"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkConnect(ProcessGroupService):
    name = "spark-connect"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.spark_connect_port, "STREAMFILL_SPARK_CONNECT_PORT")]

    def prepare(self) -> None:
        if shutil.which("java") is None:
            raise StackError("spark-connect: no `java` on PATH; `streamfill stack up` installs it with Kafka, or "
                             "run `apt-get install -y default-jre-headless`")
        (self.root / "work").mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        s = self.settings
        return [str(spark_home() / "bin" / "spark-submit"), "--master", s.spark_master,
                "--driver-memory", DRIVER_MEMORY,
                "--conf", f"spark.connect.grpc.binding.address={s.host}",
                "--conf", f"spark.connect.grpc.binding.port={s.spark_connect_port}",
                "--conf", "spark.connect.session.manager.defaultSessionTimeout=-1",
                "--conf", "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.showConsoleProgress=false",
                "--conf", f"spark.local.dir={self.root / 'work'}", "--conf", f"spark.driver.host={s.host}",
                "--conf", "spark.ui.port=4050", "--class", SERVER_CLASS, "--name", "Spark Connect server"]

    def start(self) -> None:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": self.settings.host}
        pid = spawn(self.command(), log=self.log, pid_file=self.pid_file, env=env)
        wait_until(self.healthy, timeout=self.settings.start_timeout, service=self.name, log=self.log,
                   alive=lambda: pid_alive(pid))
        # spark-submit's script execs the JVM in the same process, with a command line of its own: the record
        # names the process as it now runs
        write_record(self.pid_file, pid, cmdline(pid))

    def healthy(self) -> bool:
        """The server's gRPC port accepts a connection (a session is opened by the first client that asks)."""
        try:
            with socket.create_connection((self.settings.host, self.settings.spark_connect_port), timeout=2):
                return True
        except OSError:
            return False

    def status(self) -> Status:
        pid = self.pid()
        return Status(self.name, self.settings.spark_remote_url, pid, pid is not None,
                      pid is not None and self.healthy(), self.log,
                      f"Spark Connect server ({self.settings.spark_master}), streams detached from their launch")

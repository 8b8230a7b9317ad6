"""Apache Kafka in KRaft combined mode (one broker that is also the controller), from the jars on Maven Central."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from app.stack.pidfile import pid_alive
from app.stack.postgres import install_os_packages
from app.stack.process import spawn, wait_until
from app.stack.service import ProcessGroupService, Status
from streamfill import REPO_ROOT
from streamfill.errors import StackError

POM = REPO_ROOT / "stack" / "kafka" / "pom.xml"
LOG4J = REPO_ROOT / "stack" / "kafka" / "log4j2.yaml"


def kafka_version(pom: Path = POM) -> str:
    return re.search(r"<kafka.version>([^<]+)</kafka.version>", pom.read_text()).group(1)


def fetch_jars(pom: Path, dest: Path) -> None:
    """`mvn dependency:copy-dependencies` of pom into dest, once; the error names what could not be fetched."""
    done_marker = dest / ".complete"
    if done_marker.exists():
        return
    if shutil.which("mvn") is None:
        install_os_packages("maven")
    dest.mkdir(parents=True, exist_ok=True)
    cmd = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={dest}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        missing = re.findall(r"([\w.\-]+:[\w.\-]+:(?:jar:)?[\w.\-]+)", done.stdout + done.stderr)
        raise StackError(
            f"Maven could not fetch the jars of {pom.name} (org.apache.kafka:kafka_2.13:{kafka_version(pom)}"
            f"{'; failing: ' + ', '.join(sorted(set(missing))[:5]) if missing else ''}).\n"
            f"{(done.stdout + done.stderr)[-1500:]}")
    done_marker.write_text(kafka_version(pom))


class Kafka(ProcessGroupService):
    name = "kafka"

    @property
    def root(self) -> Path:
        return self.settings.home / "kafka"

    @property
    def libs(self) -> Path:
        return self.root / "libs"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.kafka_port, "STREAMFILL_KAFKA_PORT"),
                (self.settings.kafka_controller_port, "STREAMFILL_KAFKA_CONTROLLER_PORT")]

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            install_os_packages("default-jre-headless")
            java = shutil.which("java") or "java"
        return java

    def _write_config(self) -> Path:
        s = self.settings
        props = self.root / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers={s.host}:{s.kafka_controller_port}",
            f"listeners=PLAINTEXT://{s.host}:{s.kafka_port},CONTROLLER://{s.host}:{s.kafka_controller_port}",
            f"advertised.listeners=PLAINTEXT://{s.host}:{s.kafka_port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.root / 'data'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
            "log.cleaner.backoff.ms=1000",
            "log.retention.check.interval.ms=5000",
            "",
        ]))
        return props

    def prepare(self) -> None:
        fetch_jars(POM, self.libs)
        java = self._java()
        props = self._write_config()
        if not (self.root / "data" / "meta.properties").exists():
            cp = f"{self.libs}/*"
            cluster_id = subprocess.run([java, "-cp", cp, "kafka.tools.StorageTool", "random-uuid"],
                                        capture_output=True, text=True, check=True).stdout.strip()
            done = subprocess.run([java, "-cp", cp, f"-Dkafka.log.file={self.log}",
                                   f"-Dlog4j2.configurationFile={LOG4J}", "kafka.tools.StorageTool",
                                   "format", "-t", cluster_id, "-c", str(props), "--standalone"],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise StackError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")

    def command(self, java: str | None = None) -> list[str]:
        return [java or shutil.which("java") or "java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC",
                f"-Dkafka.log.file={self.log}", f"-Dlog4j2.configurationFile={LOG4J}",
                "-cp", f"{self.libs}/*", "kafka.Kafka", str(self.root / "server.properties")]

    def signature(self) -> tuple[list[str], Path | None]:
        return ["kafka.Kafka", str(self.root / "server.properties")], None

    def start(self) -> None:
        pid = spawn(self.command(self._java()), log=self.root / "stdout.log", pid_file=self.pid_file)
        wait_until(self.healthy, timeout=self.settings.start_timeout, service=self.name, log=self.log,
                   alive=lambda: pid_alive(pid))

    def healthy(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.settings.bootstrap_servers,
                              "socket.timeout.ms": 3000, "log_level": 0}).list_topics(timeout=3)
            return len(md.brokers) > 0
        except Exception:  # noqa: BLE001 - any failure means "not answering"
            return False

    def status(self) -> Status:
        pid = self.pid()
        return Status(self.name, self.settings.bootstrap_servers, pid, pid is not None,
                      pid is not None and self.healthy(), self.log, f"KRaft combined mode, Kafka {kafka_version()}")

"""Apache Kafka in KRaft combined mode (one broker that is also the controller), from the jars on Maven Central.

Three client listeners: PLAINTEXT for the demo and the CLI; SASL_SSL (SCRAM-SHA-512, a certificate signed by the
stack's own CA) with the authorizer on, as a team's cluster would ask for credentials and ACLs; and OAUTH
(SASL_PLAINTEXT with OAUTHBEARER, tokens checked by Kafka's unsecured JWT validator) to test the token path end to
end without an identity provider. On the PLAINTEXT and controller listeners clients are User:ANONYMOUS, a super
user; on SASL_SSL the jobs' SCRAM user, and on OAUTH a token whose subject is that user, may use every topic,
group and transactional id, and any other user only what an ACL grants it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from streamfill import REPO_ROOT
from streamfill.cli.stack.os_packages import install_os_packages
from streamfill.cli.stack.pidfile import pid_alive
from streamfill.cli.stack.process import spawn, wait_until
from streamfill.cli.stack.secret_file import ensure_secret, generate_password, private_dir
from streamfill.cli.stack.service import ProcessGroupService, Status
from streamfill.cli.stack.tls import ensure_server_pem, stack_hosts
from streamfill.errors import StackError
from streamfill.settings import KAFKA_JOBS_USER, Settings

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


def ensure_secrets(settings: Settings) -> Path:
    """The SASL_SSL listener's secrets, made at first start: the jobs user's password, the stack's CA and the
    broker's key and certificate (for stack_hosts). The broker's PEM file."""
    private_dir(settings.kafka_password_file.parent)
    ensure_secret(settings.kafka_password_file, generate_password)
    return ensure_server_pem(settings.tls_dir, "kafka", stack_hosts(settings))


def grant_scram_user(admin, user: str, password: str, allowed: list[tuple]) -> None:
    """Give `user` SCRAM-SHA-512 credentials with `password` and allow it each (resource type, resource name,
    operation) of `allowed`, from any host, through a confluent_kafka AdminClient; waits until the broker applied
    both."""
    from confluent_kafka.admin import (
        AclBinding,
        AclPermissionType,
        ResourcePatternType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion(user, credential, password.encode())
    acls = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
                       AclPermissionType.ALLOW) for kind, name, operation in allowed]
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(timeout=30)
    for fut in admin.create_acls(acls).values():
        fut.result(timeout=30)


class Kafka(ProcessGroupService):
    name = "kafka"

    @property
    def libs(self) -> Path:
        return self.root / "libs"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.kafka_port, "STREAMFILL_KAFKA_PORT"),
                (self.settings.kafka_controller_port, "STREAMFILL_KAFKA_CONTROLLER_PORT"),
                (self.settings.kafka_sasl_port, "STREAMFILL_KAFKA_SASL_PORT"),
                (self.settings.kafka_oauth_port, "STREAMFILL_KAFKA_OAUTH_PORT")]

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            install_os_packages("default-jre-headless")
            java = shutil.which("java") or "java"
        return java

    def _write_config(self) -> Path:
        s = self.settings
        broker_pem = ensure_secrets(s)
        props = self.root / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers={s.host}:{s.kafka_controller_port}",
            f"listeners=PLAINTEXT://{s.host}:{s.kafka_port},CONTROLLER://{s.host}:{s.kafka_controller_port},"
            f"SASL_SSL://{s.host}:{s.kafka_sasl_port},OAUTH://{s.host}:{s.kafka_oauth_port}",
            f"advertised.listeners=PLAINTEXT://{s.host}:{s.kafka_port},SASL_SSL://{s.host}:{s.kafka_sasl_port},"
            f"OAUTH://{s.host}:{s.kafka_oauth_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
            "OAUTH:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            # no server callback handler: Kafka's unsecured JWT validator checks the tokens (tests only)
            "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_ssl.ssl.keystore.type=PEM",
            f"listener.name.sasl_ssl.ssl.keystore.location={broker_pem}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
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
        self._grant_jobs_user()

    def _grant_jobs_user(self) -> None:
        """The jobs' SCRAM credentials (the stack's generated password) and their ACLs, set over PLAINTEXT as
        the super user; both are kept in the cluster's metadata, so setting them again changes nothing."""
        from confluent_kafka.admin import AclOperation, AdminClient, ResourceType

        s = self.settings
        admin = AdminClient({"bootstrap.servers": s.bootstrap_servers, "log_level": 0})
        password = s.kafka_password_file.read_text().strip()
        allowed = [(ResourceType.TOPIC, "*", AclOperation.ALL), (ResourceType.GROUP, "*", AclOperation.ALL),
                   (ResourceType.TRANSACTIONAL_ID, "*", AclOperation.ALL),
                   (ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
                   (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)]
        try:
            grant_scram_user(admin, KAFKA_JOBS_USER, password, allowed)
        except Exception as exc:  # a KafkaException or a timeout: either way the listener is not usable
            raise StackError(f"setting up Kafka user {KAFKA_JOBS_USER!r} and its ACLs on the SASL_SSL listener "
                             f"failed: {exc}. See {self.log}") from None

    def healthy(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.settings.bootstrap_servers,
                              "socket.timeout.ms": 3000, "log_level": 0}).list_topics(timeout=3)
            return len(md.brokers) > 0
        except Exception:  # any failure means "not answering"
            return False

    def status(self) -> Status:
        pid = self.pid()
        s = self.settings
        return Status(self.name, s.bootstrap_servers, pid, pid is not None, pid is not None and self.healthy(),
                      self.log, f"KRaft combined mode, Kafka {kafka_version()}; SASL_SSL (SCRAM-SHA-512, user "
                      f"{KAFKA_JOBS_USER}, CA {s.ca_file}) on {s.kafka_secured_servers}")

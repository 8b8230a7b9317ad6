"""Apicurio Registry, a schema registry with Confluent's API (`/apis/ccompat/v7`), from Maven Central.

Its release is the `all` tar.gz of io.apicurio:apicurio-registry-app (Java 17 runs the 3.0 line; 3.3 needs Java
21). Maven cannot resolve that artifact (its parent POM is not on Maven Central), so it is fetched over HTTPS from
Maven Central's layout and checked against the repository's SHA-1. Schemas are kept in an H2 database file under
the stack's home, so a restarted registry knows every schema id it gave out, as a production registry would.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from streamfill.cli.stack.pidfile import pid_alive
from streamfill.cli.stack.process import spawn, wait_until
from streamfill.cli.stack.service import ProcessGroupService, Status
from streamfill.errors import StackError

APICURIO_VERSION = "3.0.9"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
ARTIFACT = f"io/apicurio/apicurio-registry-app/{APICURIO_VERSION}/apicurio-registry-app-{APICURIO_VERSION}-all.tar.gz"


def fetch_release(dest: Path, base: str = MAVEN_CENTRAL) -> Path:
    """The unpacked release in dest (its runner jar), downloaded and checked once."""
    runner = dest / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
    if (dest / ".complete").exists() and runner.exists():
        return runner
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / "release.tar.gz"
    url = f"{base}/{ARTIFACT}"
    sha1 = hashlib.sha1()
    try:
        expected = urllib.request.urlopen(f"{url}.sha1", timeout=60).read().decode().split()[0]
        with urllib.request.urlopen(url, timeout=600) as response, archive.open("wb") as out:
            while chunk := response.read(1 << 20):
                sha1.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        raise StackError(f"downloading Apicurio Registry {APICURIO_VERSION} from {url} failed: {exc}. Check "
                         "that Maven Central is reachable (an HTTPS proxy goes in HTTPS_PROXY)") from None
    digest = sha1.hexdigest()
    if digest != expected:
        archive.unlink()
        raise StackError(f"{url} has SHA-1 {digest}, Maven Central says {expected}: the download was damaged; "
                         "run `streamfill stack up` again")
    unpacked = dest / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    inside = list(unpacked.iterdir())
    root = inside[0] if len(inside) == 1 and inside[0].is_dir() else unpacked  # one top folder, or none
    for item in root.iterdir():
        target = dest / item.name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        item.rename(target)
    shutil.rmtree(unpacked)
    archive.unlink()
    if not runner.exists():
        raise StackError(f"the Apicurio Registry {APICURIO_VERSION} release has no {runner.name}")
    (dest / ".complete").write_text(APICURIO_VERSION)
    return runner


class SchemaRegistry(ProcessGroupService):
    name = "schema-registry"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.schema_registry_port, "STREAMFILL_SCHEMA_REGISTRY_PORT")]

    def prepare(self) -> None:
        fetch_release(self.root / "release")
        (self.root / "data").mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        s = self.settings
        runner = self.root / "release" / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
        return [shutil.which("java") or "java", "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1",
                "-Djava.util.logging.manager=org.jboss.logmanager.LogManager",
                f"-Dquarkus.http.host={s.host}", f"-Dquarkus.http.port={s.schema_registry_port}",
                f"-Dapicurio.datasource.url=jdbc:h2:file:{self.root / 'data' / 'registry'}",
                "-Dapicurio.datasource.jdbc.initial-size=2", "-Dapicurio.datasource.jdbc.min-size=2",
                f"-Dquarkus.log.file.path={self.log}", "-Dquarkus.log.file.enable=true",
                "-Dquarkus.log.console.enable=false", "-jar", str(runner)]

    def signature(self) -> tuple[list[str], Path | None]:
        return ["-jar", str(self.root / "release" / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar")], None

    def start(self) -> None:
        pid = spawn(self.command(), log=self.root / "stdout.log", pid_file=self.pid_file)
        wait_until(self.healthy, timeout=self.settings.start_timeout, service=self.name, log=self.log,
                   alive=lambda: pid_alive(pid))

    def healthy(self) -> bool:
        s = self.settings
        try:
            with urllib.request.urlopen(f"http://{s.host}:{s.schema_registry_port}/health/ready", timeout=3) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def status(self) -> Status:
        pid = self.pid()
        return Status(self.name, self.settings.local_schema_registry_url, pid, pid is not None,
                      pid is not None and self.healthy(), self.log,
                      f"Apicurio Registry {APICURIO_VERSION}, Confluent-compatible API, schemas in H2")

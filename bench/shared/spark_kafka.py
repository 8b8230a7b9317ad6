"""Spark's own Kafka source and PostgreSQL's JDBC driver, the jars the benchmarks' alternative ways run with,
fetched once with Maven."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rich.console import Console

from streamfill import REPO_ROOT

console = Console()
POM = REPO_ROOT / "bench" / "spark-kafka" / "pom.xml"
KAFKA_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2",
              "postgresql")


def spark_kafka_jars(dest: Path) -> list[str]:
    if not (dest / ".complete").exists() or not list(dest.glob("postgresql-*.jar")):
        console.print(f"fetching Spark's Kafka source with Maven into {dest}")
        subprocess.run(["mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
                        "-DincludeScope=runtime", f"-DoutputDirectory={dest}"], check=True)
        (dest / ".complete").touch()
    return sorted(str(p) for p in dest.glob("*.jar") if p.name.startswith(KAFKA_JARS))

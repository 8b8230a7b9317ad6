"""The names of what streamfill reads and writes, as other tools name them: a PostgreSQL table as an Airflow Asset
URI (the form Airflow's postgres provider normalises to, so an asset another DAG declares for the same table is
the same asset) and as an OpenLineage dataset, a Kafka topic as an OpenLineage dataset. One place for the rules,
so the asset a downstream DAG schedules on and the lineage graph's node are the same table."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from streamfill.errors import OptionError
from streamfill.names import parse_table
from streamfill.urls import without_password

PG_PORT, KAFKA_PORT = 5432, 9092
DEFAULT_SCHEMA = "public"  # where PostgreSQL puts an unqualified table with the default search_path
# the Kafka cluster's name in lineage when its listeners differ between jobs (PLAINTEXT and SASL_SSL addresses of
# one cluster, say): `kafka://host:port` of the address the lineage graph should show
KAFKA_NAMESPACE_SETTING = "STREAMFILL_LINEAGE_KAFKA_NAMESPACE"


@dataclass(frozen=True)
class PgTable:
    host: str
    port: int
    database: str
    schema: str
    table: str

    @classmethod
    def of(cls, db_url: str, table: str) -> PgTable:
        """The table `table` (`t` or `schema.t`) of the database a SQLAlchemy or libpq URL names."""
        parts = urlsplit(db_url)
        database = unquote(parts.path.lstrip("/"))
        if not parts.hostname or not database:
            raise OptionError("database URL", without_password(db_url), "names no host or no database",
                              "use postgresql://user@host:5432/database")
        schema, name = parse_table(table)
        return cls(parts.hostname, parts.port or PG_PORT, database, schema or DEFAULT_SCHEMA, name)

    @classmethod
    def of_asset_uri(cls, uri: str) -> PgTable:
        parts = urlsplit(uri)
        path = [unquote(p) for p in parts.path.strip("/").split("/")]
        if parts.scheme != "postgres" or not parts.hostname or len(path) != 3:
            raise OptionError("asset URI", uri, "is not a PostgreSQL table's asset URI",
                              "use postgres://host:port/database/schema/table")
        return cls(parts.hostname, parts.port or PG_PORT, *path)

    @property
    def asset_uri(self) -> str:
        return f"postgres://{self.host}:{self.port}/{self.database}/{self.schema}/{self.table}"

    @property
    def lineage_namespace(self) -> str:
        return f"postgres://{self.host}:{self.port}"

    @property
    def lineage_name(self) -> str:
        return f"{self.database}.{self.schema}.{self.table}"


@dataclass(frozen=True)
class KafkaTopic:
    namespace: str  # kafka://host:port of the cluster
    topic: str

    @classmethod
    def of(cls, bootstrap_servers: str, topic: str, environ=os.environ) -> KafkaTopic:
        """The topic on the cluster whose first bootstrap address is the lineage namespace, unless
        STREAMFILL_LINEAGE_KAFKA_NAMESPACE names the cluster."""
        named = environ.get(KAFKA_NAMESPACE_SETTING)
        if named:
            if not named.startswith("kafka://"):
                raise OptionError(KAFKA_NAMESPACE_SETTING, named, "is not a kafka:// address",
                                  "use kafka://host:port, e.g. kafka://broker-1:9092")
            return cls(named.rstrip("/"), topic)
        first = bootstrap_servers.split(",")[0].strip()
        address = first.split("://", 1)[-1]
        if not address:
            raise OptionError("bootstrap.servers", bootstrap_servers, "names no broker", "e.g. broker-1:9092")
        host, _, port = address.rpartition(":") if ":" in address else (address, "", str(KAFKA_PORT))
        return cls(f"kafka://{host}:{port or KAFKA_PORT}", topic)

    @property
    def lineage_namespace(self) -> str:
        return self.namespace

    @property
    def lineage_name(self) -> str:
        return self.topic


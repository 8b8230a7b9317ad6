"""Every setting of the local stack and the jobs, read from `STREAMFILL_*` environment variables."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamfill import REPO_ROOT
from streamfill.errors import OptionError
from streamfill.kafka_client import (
    CLIENT_FIELDS,
    DEFAULT_GROUP_ID,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    property_value,
)
from streamfill.names import PLAIN_NAME
from streamfill.option_tables import docs_row
from streamfill.retention_ages import DEFAULT as DEFAULT_RETENTION
from streamfill.retention_ages import Retention, parse_age, written
from streamfill.urls import without_password

AIRFLOW_USER = "admin"
KAFKA_JOBS_USER = "streamfill"  # the local stack's SCRAM user on its SASL_SSL listener
# a checkout keeps its stack beside the code; an installed wheel's code sits in site-packages, which is no place
# for checkpoints
DEFAULT_HOME = REPO_ROOT / ".stack" if (REPO_ROOT / "pyproject.toml").is_file() else Path.home() / ".streamfill"
# the pid of the Airflow task that launched a stream: the stream stops (within its stop grace) once it is gone
STOP_WITH_ENV = "STREAMFILL_STOP_WITH"
OFFSETS_DB_SCHEMA = "streamfill"  # offsets_db's own schema, so its jobs/runs/batches never meet a team's tables
PgSslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]  # libpq's


@dataclass
class _Command:
    tell: Callable[[str], None]
    told: set[str] = dataclass_field(default_factory=set)


# A service whose address is not set is the local stack's. A command (the CLI, a job's spark-submit entry) says so,
# once per address, and refuses where STREAMFILL_HOME holds no local stack (`as_command`): a team's machine never
# reaches 127.0.0.1 by accident. Anything else (a Spark worker, Airflow's processes, a test) takes the local
# stack's address as it is, as a library would.
_command: _Command | None = None


@contextmanager
def as_command(tell: Callable[[str], None]) -> Iterator[None]:
    """While inside, this process runs a command: each address taken from the local stack for want of its
    setting is told (`tell`, once), and refused (OptionError naming the setting) without a local stack."""
    global _command
    before, _command = _command, _Command(tell)
    try:
        yield
    finally:
        _command = before


class Settings(BaseSettings):
    """Ports, directories and URLs; each field is `STREAMFILL_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="STREAMFILL_", extra="ignore")

    home: Path = Field(DEFAULT_HOME, description="data, logs, pid files and secrets of the local stack",
                       json_schema_extra=docs_row("settings", shown_default="`<repo>/.stack`"))
    host: str = Field("127.0.0.1", description="the one address every service listens on; keep it on loopback "
                      "unless other machines must reach the stack", json_schema_extra=docs_row("settings"))
    pg_port: int = Field(5432, ge=1, le=65535, description="PostgreSQL", json_schema_extra=docs_row("settings"))
    kafka_port: int = Field(9092, ge=1, le=65535, description="Kafka broker and KRaft controller",
                            json_schema_extra=docs_row("settings", group="kafka ports"))
    kafka_controller_port: int = Field(9093, ge=1, le=65535,
                                       json_schema_extra=docs_row("settings", group="kafka ports"))
    airflow_port: int = Field(8080, ge=1, le=65535, description="Airflow API server and UI",
                              json_schema_extra=docs_row("settings"))
    airflow_parallelism: int = Field(4, ge=1, description="LocalExecutor workers (Airflow's default of 32 costs "
                                     "about 5 GB)", json_schema_extra=docs_row("settings"))
    db_user: str = Field("streamfill", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    db_name: str = Field("streamfill", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    airflow_db_name: str = Field("airflow", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    db_url: str | None = Field(
        None, description="offsets_db URL (`postgresql+psycopg2://...`); when set, it carries its own password",
        json_schema_extra=docs_row("settings", shown_default="the local stack's `streamfill` database, where "
                                   "`STREAMFILL_HOME` holds a stack ([below](#addresses-not-set))"))
    assets_database: str | None = Field(
        None, pattern=r"^[a-z][a-z0-9+]*://[^/]+/[^/?#]+$",
        description="the database that names the tables' Airflow Assets (postgres://host:port/database, the "
                    "host and database a downstream DAG declares them with); defaults to STREAMFILL_DB_URL's, "
                    "else the local stack's postgres://127.0.0.1:5432/streamfill")
    db_schema: str = Field(OFFSETS_DB_SCHEMA, pattern=PLAIN_NAME,
                           description="the PostgreSQL schema that holds offsets_db's tables and views")
    pg_sslmode: PgSslMode | None = Field(None, description="libpq's sslmode for the local stack's databases; "
                                         "verify-ca and verify-full trust the stack's CA")
    pg_password: SecretStr | None = Field(
        None, description="password of the `streamfill` role, for the stack and its clients",
        json_schema_extra=docs_row("settings", shown_default="the content of `$STREAMFILL_HOME/secrets/pg_password`"))
    kafka_sasl_port: int = Field(9094, ge=1, le=65535, description="the local broker's SASL_SSL listener")
    kafka_oauth_port: int = Field(9095, ge=1, le=65535, description="the local broker's OAUTHBEARER listener "
                                  "(unsecured tokens, for tests)")
    kafka_bootstrap_servers: str | None = Field(
        None, description="Kafka for jobs and tests",
        json_schema_extra=docs_row("settings", shown_default="the local stack's broker, where `STREAMFILL_HOME` "
                                   "holds a stack"))
    kafka_security_protocol: str | None = Field(None, description=f"one of {', '.join(SECURITY_PROTOCOLS)}")
    kafka_sasl_mechanism: str | None = Field(None, description=f"one of {', '.join(SASL_MECHANISMS)}")
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_ca_location: Path | None = Field(None, description="PEM file of the CA that signed the brokers")
    kafka_ssl_certificate_location: Path | None = Field(None, description="client certificate (mutual TLS)")
    kafka_ssl_key_location: Path | None = Field(None, description="client private key (mutual TLS)")
    kafka_ssl_key_password: SecretStr | None = None
    kafka_group_id: str | None = Field(None, min_length=1, description="the reader's consumer group id (ACLs may "
                                       f"limit a user to some groups); {DEFAULT_GROUP_ID} by default")
    kafka_config: SecretStr | None = Field(None, description="any other librdkafka properties, as a JSON object "
                                           "(it may hold secrets)")
    schema_registry_port: int = Field(8081, ge=1, le=65535, description="the local stack's schema registry")
    schema_registry_url: str | None = Field(None, description="a Confluent-compatible schema registry; defaults "
                                            "to the local stack's, where STREAMFILL_HOME holds a stack")
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    spark_master: str = Field("local[*]", description="any Spark master URL", json_schema_extra=docs_row("settings"))
    spark_connect_port: int = Field(15002, ge=1, le=65535, description="the local stack's Spark Connect server",
                                    json_schema_extra=docs_row("settings"))
    spark_remote: str | None = Field(
        None, pattern=r"^sc://[^/]+(/.*)?$",
        description="a Spark Connect server (`sc://host:15002`) where a detached stream's driver runs",
        json_schema_extra=docs_row("settings", shown_default="the local stack's, where `STREAMFILL_HOME` holds a "
                                   "stack"))
    start_timeout: float = Field(240.0, gt=0, description="seconds each service may take to answer",
                                 json_schema_extra=docs_row("settings"))
    # what goes once older than each age (docs/operations.md's retention table)
    retain_history: str = Field(written(DEFAULT_RETENTION.history), description="committed batches with their "
                                "offsets, batches planned and never committed, data-loss events, ended runs",
                                json_schema_extra=docs_row("retention"))
    retain_windows: str = Field(written(DEFAULT_RETENTION.windows), description="an interval window's whole job "
                                "(`<entry>.interval.<start>`), counted from its last batch; a re-run of the window "
                                "later reads it again in `replace` mode", json_schema_extra=docs_row("retention"))
    retain_dead_letters: str = Field(written(DEFAULT_RETENTION.dead_letters),
                                     description="dead letters and their raw bytes",
                                     json_schema_extra=docs_row("retention"))
    retain_quality_results: str = Field(written(DEFAULT_RETENTION.quality_results), description="quality results",
                                        json_schema_extra=docs_row("retention"))
    retain_announcements: str = Field(written(DEFAULT_RETENTION.announcements),
                                      description="announcements Airflow has stored",
                                      json_schema_extra=docs_row("retention"))
    retain_stages: str = Field(written(DEFAULT_RETENTION.stages), description="staging tables no running launch "
                               "uses: those of jobs no launch holds, and those left by an entry whose columns "
                               "changed (each column set has its own)", json_schema_extra=docs_row("retention"))
    retain_deleted_keys: str = Field(written(DEFAULT_RETENTION.deleted_keys), description="a table's deleted keys "
                                     "(offsets_db's `deleted_keys`) whose records Kafka no longer holds: below their "
                                     "partition's log-start offset, or compacted away; counted from the key's newest "
                                     "delete. The age must outlast any batch from its read to its commit "
                                     "([Deletes](pipelines.md#deletes-tombstones-on-a-compacted-topic))",
                                     json_schema_extra=docs_row("retention"))

    @field_validator("retain_history", "retain_windows", "retain_dead_letters", "retain_quality_results",
                     "retain_announcements", "retain_stages", "retain_deleted_keys")
    @classmethod
    def _an_age(cls, value: str, info) -> str:
        try:
            parse_age(value)
        except ValueError as exc:
            raise ValueError(f"STREAMFILL_{info.field_name.upper()}={value!r} {str(exc).split(' ', 1)[1]}") \
                from None
        return value

    def retention(self) -> Retention:
        """The ages `streamfill db prune` and the maintenance DAG remove history at."""
        return Retention(**{kind: parse_age(getattr(self, f"retain_{kind}")) for kind in Retention.kinds()})

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism")
    @classmethod
    def _known_name(cls, value: str | None, info) -> str | None:
        if value is None:
            return None
        known = SECURITY_PROTOCOLS if info.field_name == "kafka_security_protocol" else SASL_MECHANISMS
        if value.upper() not in known:
            raise ValueError(f"STREAMFILL_{info.field_name.upper()}={value!r} is not one of {', '.join(known)}")
        return value.upper()

    @property
    def offsets_db_url(self) -> str:
        if self.db_url:
            return self.db_url
        return self._local("offsets_db", "STREAMFILL_DB_URL", self._stack_db_url(self.db_name),
                           "offsets_db's URL, e.g. postgresql+psycopg2://USER:PASSWORD@HOST:5432/DATABASE")

    @property
    def local_stack(self) -> bool:
        """Whether `streamfill stack up` ran with this home: its first start writes the PostgreSQL password file."""
        try:
            return self.pg_password_file.is_file()
        except OSError:  # another OS user's stack: not this user's to fall back to
            return False

    def _local(self, service: str, setting: str, address: str, example: str) -> str:
        """`address`, the local stack's `service`, for want of `setting` (said or refused in a command,
        `as_command`)."""
        if _command is None:
            return address
        if not self.local_stack:
            raise OptionError(setting, None, f"is not set, and STREAMFILL_HOME ({self.home}) holds no local stack "
                              f"whose {service} to use instead", f"Set {setting} to {example}, or start the "
                              "local stack there with `streamfill stack up`")
        if setting not in _command.told:
            _command.told.add(setting)
            _command.tell(f"{service}: the local stack's {without_password(address)} ({setting} is not set)")
        return address

    @property
    def assets_database_url(self) -> str:
        """The database part of the tables' Asset URIs: a setting, read without Airflow's connections, so naming
        the assets while a DAG file parses needs no connection, variable or database."""
        return self.assets_database or self.db_url or f"postgres://{self.host}:{self.pg_port}/{self.db_name}"

    @property
    def airflow_db_url(self) -> str:
        return self._stack_db_url(self.airflow_db_name)

    @property
    def pg_password_file(self) -> Path:
        """The local stack's generated PostgreSQL password of db_user (mode 0600, in a 0700 directory)."""
        return self.home / "secrets" / "pg_password"

    def db_password(self) -> str | None:
        """STREAMFILL_PG_PASSWORD, else the stack's password file; None before the stack ever ran (or when
        the file is not this user's to read)."""
        if self.pg_password is not None:
            return self.pg_password.get_secret_value()
        try:
            return self.pg_password_file.read_text().strip() or None
        except OSError:
            return None

    def _stack_db_url(self, database: str) -> str:
        """A database of the local stack's PostgreSQL, as db_user with its password (TCP needs it)."""
        password = self.db_password()
        auth = self.db_user + (f":{quote(password, safe='')}" if password else "")
        url = f"postgresql+psycopg2://{auth}@{self.host}:{self.pg_port}/{database}"
        if self.pg_sslmode is None:
            return url
        root = f"&sslrootcert={quote(str(self.ca_file))}" if self.pg_sslmode.startswith("verify") else ""
        return f"{url}?sslmode={self.pg_sslmode}{root}"

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_bootstrap_servers or self._local(
            "Kafka", "STREAMFILL_KAFKA_BOOTSTRAP_SERVERS", f"{self.host}:{self.kafka_port}",
            "the cluster's bootstrap servers, e.g. broker-1:9092,broker-2:9092")

    def kafka_client(self) -> dict[str, str]:
        """The cluster's librdkafka settings (secrets included: hand them to a client, never to a log)."""
        conf = {**self.kafka_properties(), "bootstrap.servers": self.bootstrap_servers}
        for field, prop in CLIENT_FIELDS.items():
            value = getattr(self, f"kafka_{field}")
            if field != "bootstrap_servers" and value is not None:
                conf[prop] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
        return conf

    def kafka_properties(self) -> dict[str, str]:
        """STREAMFILL_KAFKA_CONFIG's librdkafka properties."""
        return json.loads(self.kafka_config.get_secret_value()) if self.kafka_config else {}

    @field_validator("kafka_config")
    @classmethod
    def _a_json_object(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        try:
            found = json.loads(value.get_secret_value())
        except ValueError:
            found = None
        if not isinstance(found, dict) or not all(isinstance(v, (str, int, float, bool)) for v in found.values()):
            # the value itself is not shown: it may hold a password
            raise ValueError("STREAMFILL_KAFKA_CONFIG is not a JSON object of librdkafka properties, e.g. "
                             '{"client.id": "orders", "ssl.endpoint.identification.algorithm": "none"}')
        return SecretStr(json.dumps({k: property_value(v) for k, v in found.items()}))

    @property
    def kafka_secured_servers(self) -> str:
        """The local broker's SASL_SSL listener."""
        return f"{self.host}:{self.kafka_sasl_port}"

    @property
    def tls_dir(self) -> Path:
        """The local stack's CA and the certificates it signed for its broker and its PostgreSQL (0700)."""
        return self.home / "tls"

    @property
    def ca_file(self) -> Path:
        """The local stack's CA certificate (PEM, generated at first start): clients of its services trust it."""
        return self.tls_dir / "ca.pem"

    @property
    def kafka_password_file(self) -> Path:
        """The local stack's generated SCRAM password of KAFKA_JOBS_USER (mode 0600)."""
        return self.home / "secrets" / "kafka_password"

    def kafka_secured_client(self) -> dict[str, str]:
        """librdkafka settings for the local broker's SASL_SSL listener as KAFKA_JOBS_USER."""
        return {"bootstrap.servers": self.kafka_secured_servers, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": KAFKA_JOBS_USER,
                "sasl.password": self.kafka_password_file.read_text().strip(),
                "ssl.ca.location": str(self.ca_file)}

    def kafka_oauth_client(self) -> dict[str, str]:
        """librdkafka settings for the local broker's OAUTHBEARER listener: an unsecured token whose subject is
        KAFKA_JOBS_USER (a production cluster takes sasl.oauthbearer.method=oidc instead)."""
        return {"bootstrap.servers": f"{self.host}:{self.kafka_oauth_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": f"principal={KAFKA_JOBS_USER}"}

    @property
    def spark_remote_url(self) -> str:
        """The Spark Connect server of detached streams: STREAMFILL_SPARK_REMOTE, else the local stack's."""
        return self.spark_remote or self._local("Spark Connect", "STREAMFILL_SPARK_REMOTE",
                                                f"sc://{self.host}:{self.spark_connect_port}",
                                                "a Spark Connect server, e.g. sc://spark-connect:15002")

    @property
    def local_schema_registry_url(self) -> str:
        return f"http://{self.host}:{self.schema_registry_port}/apis/ccompat/v7"

    def schema_registry(self) -> dict[str, str]:
        """The registry's client settings (confluent-kafka's SchemaRegistryClient names; secrets included)."""
        conf = {"url": self.schema_registry_url or self._local(
            "schema registry", "STREAMFILL_SCHEMA_REGISTRY_URL", self.local_schema_registry_url,
            "the registry's URL, e.g. https://registry:8081")}
        if self.schema_registry_username:
            password = self.schema_registry_password.get_secret_value() if self.schema_registry_password else ""
            conf["basic.auth.user.info"] = f"{self.schema_registry_username}:{password}"
        return conf

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def airflow_password_file(self) -> Path:
        """Where the local stack's Airflow keeps its generated admin password (mode 0600)."""
        return self.home / "airflow" / "simple_auth_manager_passwords.json.generated"

    def airflow_login(self) -> tuple[str, str]:
        """The local stack's Airflow user and password (simple auth manager)."""
        return AIRFLOW_USER, json.loads(self.airflow_password_file.read_text())[AIRFLOW_USER]


def get_settings() -> Settings:
    """The settings of this environment; a bad STREAMFILL_* value is an OptionError naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = f"STREAMFILL_{str(first['loc'][0]).upper()}"
        problem = first["msg"].removeprefix("Value error, ").replace(f"{name}={first['input']!r} ", "")
        field = Settings.model_fields.get(str(first["loc"][0]))
        secret = field is not None and "SecretStr" in str(field.annotation)
        shown = "<not shown: it may hold a secret>" if secret else first["input"]
        raise OptionError(name, shown, problem, f"Fix {name} or unset it") from None


def default_db_url() -> str:
    """offsets_db's URL when an option or flag gives none: STREAMFILL_DB_URL, else the local stack's database."""
    return Settings().offsets_db_url

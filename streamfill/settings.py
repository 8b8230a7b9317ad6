"""Every setting of the local stack and the jobs, read from `STREAMFILL_*` environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamfill import REPO_ROOT

AIRFLOW_USER = "admin"


class Settings(BaseSettings):
    """Ports, directories and URLs; each field is `STREAMFILL_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="STREAMFILL_", extra="ignore")

    home: Path = Field(REPO_ROOT / ".stack", description="where the local stack keeps data, logs and pids")
    host: str = Field("127.0.0.1", description="the address every local service listens on")
    pg_port: int = Field(5432, ge=1, le=65535)
    kafka_port: int = Field(9092, ge=1, le=65535)
    kafka_controller_port: int = Field(9093, ge=1, le=65535)
    airflow_port: int = Field(8080, ge=1, le=65535)
    airflow_parallelism: int = Field(4, ge=1, description="LocalExecutor workers; 32 by default in Airflow")
    db_user: str = Field("streamfill", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    db_name: str = Field("streamfill", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    airflow_db_name: str = Field("airflow", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    db_url: str | None = Field(None, description="offsets_db URL; defaults to the local stack's database")
    pg_password: SecretStr | None = Field(None, description="password of db_user; defaults to the stack's file")
    kafka_bootstrap_servers: str | None = Field(None, description="defaults to the local broker")
    spark_master: str = Field("local[*]", description="any Spark master URL")
    start_timeout: float = Field(240.0, gt=0, description="seconds each service may take to answer")

    @property
    def offsets_db_url(self) -> str:
        if self.db_url:
            return self.db_url
        return self._stack_db_url(self.db_name)

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
        return f"postgresql+psycopg2://{auth}@{self.host}:{self.pg_port}/{database}"

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_bootstrap_servers or f"{self.host}:{self.kafka_port}"

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
    return Settings()


def default_db_url() -> str:
    """offsets_db's URL when an option or flag gives none: STREAMFILL_DB_URL, else the local stack's database."""
    return Settings().offsets_db_url

"""The settings a pipeline entry nests under a key of its own: `health:`, `schema_registry:` and `spark:`."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

CONN_ID = r"^[A-Za-z0-9_.-]{1,250}$"  # Airflow's connection ids: letters, digits, _, . and -
SPARK_MEMORY = r"^[0-9]+[kKmMgGtT]?$"  # spark-submit's --executor-memory and --driver-memory: 512m, 4g
MAVEN_COORDINATE = r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+$"  # group:artifact:version (--packages)


class HealthSpec(BaseModel):
    """`health:`: how often the stream's health is checked, and the commit age and lag that count as unhealthy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every_minutes: StrictInt = Field(5, ge=1)
    max_commit_age_minutes: StrictInt = Field(15, ge=1)
    max_lag: StrictInt = Field(500_000, ge=0)

    @property
    def schedule(self) -> str:
        """The cron of the stream's health DAG: every `every_minutes` minutes of each hour."""
        return f"*/{self.every_minutes} * * * *"


class RegistrySpec(BaseModel):
    """`schema_registry:` of an Avro entry (or an Avro Debezium one) in Confluent's wire format: each value's
    schema id gives its writer's schema. Credentials never go here: they come from the connection
    streamfill_schema_registry or the STREAMFILL_SCHEMA_REGISTRY_* settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str | None = Field(None, min_length=1)  # Confluent's default: <topic>-value
    url: str | None = Field(None, pattern=r"^https?://")  # default: the connection's or the setting's


class SparkSpec(BaseModel):
    """`spark:`: what the entry's launches from Airflow ask of Spark, given to spark-submit through the apache-spark
    provider's hook (orchestration/spark_command.py). The master, deploy mode and queue are the connection's
    (`spark_conn_id`), not the entry's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conf: dict[str, StrictStr | StrictInt | StrictFloat | StrictBool] = Field(default_factory=dict)  # --conf k=v
    executor_memory: str | None = Field(None, pattern=SPARK_MEMORY)
    executor_cores: StrictInt | None = Field(None, ge=1)
    driver_memory: str | None = Field(None, pattern=SPARK_MEMORY)
    num_executors: StrictInt | None = Field(None, ge=1)
    packages: list[str] = Field(default_factory=list)  # Maven coordinates, resolved by spark-submit

    @field_validator("conf")
    @classmethod
    def _spark_keys(cls, v: dict) -> dict:
        for key in v:
            if not key.startswith("spark."):
                raise ValueError(f"spark.conf key {key!r} is not a Spark property (spark-submit ignores those); "
                                 "name one that starts with spark., e.g. spark.sql.shuffle.partitions")
        return v

    @field_validator("packages")
    @classmethod
    def _coordinates(cls, v: list[str]) -> list[str]:
        for package in v:
            if not re.fullmatch(MAVEN_COORDINATE, package):
                raise ValueError(f"spark.packages {package!r} is not a Maven coordinate; write group:artifact:"
                                 "version, e.g. org.postgresql:postgresql:42.7.4")
        return v

    def conf_values(self) -> dict[str, str]:
        """conf as spark-submit takes it: text, a boolean as Spark writes one."""
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.conf.items()}

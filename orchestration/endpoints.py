"""Where the DAGs' tasks find offsets_db, the Kafka cluster, the schema registry and Spark: the Airflow connections
and variable, read inside a task and handed to a job as its STREAMFILL_* environment.

Set up by `streamfill stack up` in Airflow's environment (AIRFLOW_CONN_*, AIRFLOW_VAR_*), or in the UI:
connections `streamfill_postgres` (offsets_db and the sink tables) and `streamfill_kafka` (the cluster: address,
security and credentials, orchestration.connections), variable `streamfill_spark_master`. Nothing about them is
in a DAG file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from streamfill.kafka_client import KAFKA_CONNECTION, settings_env
from streamfill.orchestration.connections import (
    POSTGRES_CONNECTION,
    SCHEMA_REGISTRY_CONNECTION,
    kafka_client,
    postgres_url,
    schema_registry_client,
    schema_registry_env,
)

POSTGRES_CONN, KAFKA_CONN, SPARK_MASTER_VAR = POSTGRES_CONNECTION, KAFKA_CONNECTION, "streamfill_spark_master"


@dataclass(frozen=True)
class Endpoints:
    db_url: str
    kafka: Mapping[str, str]  # librdkafka settings of the cluster, credentials included
    spark_master: str
    schema_registry: Mapping[str, str] = field(default_factory=dict)  # the registry's client settings, if any

    def env(self) -> dict[str, str]:
        """The job's STREAMFILL_* settings; credentials travel in the environment, never on a command line."""
        return {"STREAMFILL_DB_URL": self.db_url, **settings_env(self.kafka),
                **schema_registry_env(self.schema_registry),
                "STREAMFILL_SPARK_MASTER": self.spark_master}


def endpoints() -> Endpoints:
    """From the Airflow connections and variable; call inside a task."""
    from airflow.sdk import BaseHook, Variable
    from airflow.sdk.exceptions import AirflowNotFoundException

    url = postgres_url(BaseHook.get_connection(POSTGRES_CONN))
    kafka = kafka_client(BaseHook.get_connection(KAFKA_CONN))
    try:
        registry = schema_registry_client(BaseHook.get_connection(SCHEMA_REGISTRY_CONNECTION))
    except AirflowNotFoundException:
        registry = {}  # no Avro entry reads a registry here
    return Endpoints(url, kafka, Variable.get(SPARK_MASTER_VAR, default="local[*]"), registry)

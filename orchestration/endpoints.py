"""Where the DAGs' tasks find offsets_db, the Kafka cluster, the schema registry and Spark: the Airflow connections
and variable, read inside a task and handed to a job as its STREAMFILL_* environment.

Set up by `streamfill stack up` in Airflow's environment (AIRFLOW_CONN_*, AIRFLOW_VAR_*), or in the UI:
connections `streamfill_postgres` (offsets_db and the sink tables) and `streamfill_kafka` (the cluster: address,
security and credentials, orchestration.connections), variable `streamfill_spark_master`. An entry of the jobs
file, or an operator, may name other connections (ConnIds); nothing about them is in a DAG file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

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
DEFAULT_SPARK_MASTER = "local[*]"
SPARK_CONNECT_TYPE = "spark_connect"  # the apache-spark provider's connection type of a Spark Connect server


@dataclass(frozen=True)
class ConnIds:
    """The Airflow connections a task reads: an operator's parameters, else its entry's, else these defaults.
    `spark` None: the master of the Variable streamfill_spark_master (local[*] without it), in client mode."""

    kafka: str = KAFKA_CONNECTION
    postgres: str = POSTGRES_CONNECTION
    schema_registry: str = SCHEMA_REGISTRY_CONNECTION
    spark: str | None = None

    @classmethod
    def of(cls, spec=None, **given: str | None) -> ConnIds:
        """`given` (kafka=, postgres=, ...: None for not given) over the entry `spec`'s `<name>_conn_id` over the
        defaults."""
        chosen = {}
        for f in fields(cls):
            value = given.get(f.name) or (getattr(spec, f"{f.name}_conn_id", None) if spec is not None else None)
            if value:
                chosen[f.name] = value
        return cls(**chosen)


@dataclass(frozen=True)
class Endpoints:
    db_url: str
    kafka: Mapping[str, str]  # librdkafka settings of the cluster, credentials included
    spark_master: str  # the Variable's master; a launch on spark_conn takes the connection's
    schema_registry: Mapping[str, str] = field(default_factory=dict)  # the registry's client settings, if any
    spark_conn: str | None = None  # the apache-spark provider's connection the jobs are submitted with
    # a Spark Connect connection's server (sc://...), where streams run detached; spark-submit then takes the
    # Variable's master (bounded work runs beside its task)
    spark_remote: str | None = None

    def env(self) -> dict[str, str]:
        """The job's STREAMFILL_* settings; credentials travel in the environment, never on a command line."""
        return {"STREAMFILL_DB_URL": self.db_url, **settings_env(self.kafka),
                **schema_registry_env(self.schema_registry),
                "STREAMFILL_SPARK_MASTER": self.spark_master}


def endpoints(conns: ConnIds | None = None) -> Endpoints:
    """From the Airflow connections `conns` (the defaults without) and the variable; call inside a task. A
    connection Airflow does not have raises AirflowNotFoundException naming it, but for the default registry's:
    without it, no Avro entry reads a registry here."""
    from airflow.sdk import BaseHook, Variable
    from airflow.sdk.exceptions import AirflowNotFoundException

    conns = conns or ConnIds()
    url = postgres_url(BaseHook.get_connection(conns.postgres))
    kafka = kafka_client(BaseHook.get_connection(conns.kafka))
    try:
        registry = schema_registry_client(BaseHook.get_connection(conns.schema_registry))
    except AirflowNotFoundException:
        if conns.schema_registry != SCHEMA_REGISTRY_CONNECTION:
            raise
        registry = {}
    spark_conn, remote = conns.spark, None
    if spark_conn is not None and BaseHook.get_connection(spark_conn).conn_type == SPARK_CONNECT_TYPE:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        spark_conn, remote = None, SparkConnectHook(conns.spark).get_connection_url()
    return Endpoints(url, kafka, Variable.get(SPARK_MASTER_VAR, default=DEFAULT_SPARK_MASTER), registry,
                     spark_conn, remote)

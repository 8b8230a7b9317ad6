"""streamfill as an Airflow provider (the entry point `apache_airflow_provider` in pyproject.toml): Airflow's
providers manager lists its operators, sensor, trigger and hooks, and its connection types, whose fields the
connection form shows. The fields are the extras orchestration/connections.py reads; the two connection-type hooks
only name the types (the jobs read the connections), the offsets_db hook reads offsets_db."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from streamfill.kafka_client import DEFAULT_GROUP_ID, SASL_MECHANISMS, SECURITY_PROTOCOLS
from streamfill.orchestration.connections import (
    KAFKA_CONNECTION,
    KAFKA_TYPE,
    SCHEMA_REGISTRY_CONNECTION,
    SCHEMA_REGISTRY_TYPE,
)


def _text(label: str, description: str = "", enum: tuple[str, ...] = ()) -> dict:
    schema: dict = {"type": ["string", "null"]}
    if enum:
        schema["enum"] = [*enum, None]
    return {"label": label, "schema": schema, **({"description": description} if description else {})}


KAFKA_FIELDS = {
    "bootstrap_servers": _text("Bootstrap servers", "host:port,host:port (else Host and Port)"),
    "security_protocol": _text("Security protocol", "", SECURITY_PROTOCOLS),
    "sasl_mechanism": _text("SASL mechanism", "with a SASL protocol", SASL_MECHANISMS),
    "ssl_ca_location": _text("CA certificate file", "PEM file of the CA that signed the brokers"),
    "ssl_certificate_location": _text("Client certificate file", "mutual TLS"),
    "ssl_key_location": _text("Client key file", "mutual TLS"),
    "ssl_key_password": _text("Client key password"),
    "group_id": _text("Consumer group id", f"the reader's group ({DEFAULT_GROUP_ID} when empty)"),
}
KAFKA_BEHAVIOUR = {"hidden-fields": ["schema", "extra"],
                   "relabeling": {"login": "SASL username", "password": "SASL password"},
                   "placeholders": {"host": "broker host, when Bootstrap servers is empty", "port": "9092"}}
SCHEMA_REGISTRY_FIELDS = {"url": _text("Registry URL", "e.g. https://registry:8081 (else Host and Port)")}
SCHEMA_REGISTRY_BEHAVIOUR = {"hidden-fields": ["schema", "extra"],
                             "relabeling": {"login": "Basic auth user", "password": "Basic auth password"},
                             "placeholders": {}}


INTEGRATION = "streamfill"
# the modules of what a DAG of a team's own composes (docs/airflow.md, "Operators, sensor and hook")
OPERATOR_MODULES = ["streamfill.orchestration.stream_operator", "streamfill.orchestration.backfill_operator",
                    "streamfill.orchestration.quality_operator", "streamfill.orchestration.announce_operator"]
SENSOR_MODULES = ["streamfill.orchestration.committed_through_sensor"]
TRIGGER_MODULES = ["streamfill.orchestration.committed_through_trigger", "streamfill.orchestration.announce_trigger"]
HOOK_MODULES = ["streamfill.orchestration.offsets_hook", "streamfill.orchestration.provider"]


def get_provider_info() -> dict:
    try:
        versions = [version("streamfill")]
    except PackageNotFoundError:
        versions = []
    return {
        "package-name": "streamfill",
        "name": "streamfill",
        "description": "Kafka batch-plus-streaming into PostgreSQL with exactly-once offsets, launched by Airflow",
        "versions": versions,
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": OPERATOR_MODULES}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": SENSOR_MODULES}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": TRIGGER_MODULES}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": HOOK_MODULES}],
        "connection-types": [
            {"hook-class-name": "streamfill.orchestration.provider.StreamfillKafkaHook", "hook-name": "Kafka "
             "(streamfill)", "connection-type": KAFKA_TYPE, "conn-fields": KAFKA_FIELDS,
             "ui-field-behaviour": KAFKA_BEHAVIOUR},
            {"hook-class-name": "streamfill.orchestration.provider.StreamfillSchemaRegistryHook",
             "hook-name": "Schema registry (streamfill)", "connection-type": SCHEMA_REGISTRY_TYPE,
             "conn-fields": SCHEMA_REGISTRY_FIELDS, "ui-field-behaviour": SCHEMA_REGISTRY_BEHAVIOUR},
        ],
    }


def _behaviour(declared: dict) -> dict:
    """The provider info's field behaviour as a hook's get_ui_field_behaviour returns it."""
    return {"hidden_fields": declared["hidden-fields"], "relabeling": declared["relabeling"],
            "placeholders": declared["placeholders"]}


try:
    from airflow.sdk import BaseHook
except ImportError:  # Airflow releases before the task SDK's hooks
    from airflow.hooks.base import BaseHook


class StreamfillKafkaHook(BaseHook):
    conn_name_attr, default_conn_name, conn_type, hook_name = "conn_id", KAFKA_CONNECTION, KAFKA_TYPE, \
        "Kafka (streamfill)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict:
        return _behaviour(KAFKA_BEHAVIOUR)


class StreamfillSchemaRegistryHook(BaseHook):
    conn_name_attr, default_conn_name, conn_type, hook_name = "conn_id", SCHEMA_REGISTRY_CONNECTION, \
        SCHEMA_REGISTRY_TYPE, "Schema registry (streamfill)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict:
        return _behaviour(SCHEMA_REGISTRY_BEHAVIOUR)

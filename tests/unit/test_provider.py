"""streamfill as Airflow sees an installed provider: its entry point, its connection types with their form fields,
and a connection saved by the form read like one written by hand."""

from __future__ import annotations

from importlib.metadata import distribution

import pytest

from streamfill.orchestration.connections import kafka_client, schema_registry_client
from streamfill.orchestration.provider import KAFKA_FIELDS

pytestmark = pytest.mark.unit


def test_the_provider_entry_point_declares_the_connection_types_with_their_fields():
    points = [e for e in distribution("streamfill").entry_points if e.group == "apache_airflow_provider"]
    assert [e.value for e in points] == ["streamfill.orchestration.provider:get_provider_info"]

    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "streamfill" in manager.providers
    assert {"streamfill_kafka", "streamfill_schema_registry"} <= set(manager.hooks)
    widgets = {k for k in manager.connection_form_widgets if k.startswith("extra__streamfill_kafka__")}
    assert widgets == {f"extra__streamfill_kafka__{field}" for field in KAFKA_FIELDS}
    assert manager.field_behaviours["streamfill_kafka"]["relabeling"]["login"] == "SASL username"


def test_a_connection_saved_by_the_form_reads_like_one_written_by_hand():
    class Saved:  # an older UI's form keeps a provider type's fields as extra__<type>__<field>
        conn_type, host, port, login, password = "streamfill_kafka", None, None, "jobs", "hunter2"
        extra_dejson = {"extra__streamfill_kafka__bootstrap_servers": "b:9094",
                        "extra__streamfill_kafka__security_protocol": "SASL_SSL",
                        "extra__streamfill_kafka__sasl_mechanism": "SCRAM-SHA-512",
                        "extra__streamfill_kafka__group_id": "team-a"}

    assert kafka_client(Saved()) == {"bootstrap.servers": "b:9094", "security.protocol": "SASL_SSL",
                                     "sasl.mechanism": "SCRAM-SHA-512", "group.id": "team-a",
                                     "sasl.username": "jobs", "sasl.password": "hunter2"}

    class Registry:
        conn_type, host, port, login, password = "streamfill_schema_registry", None, None, "u", "p"
        extra_dejson = {"extra__streamfill_schema_registry__url": "https://registry:8081"}

    assert schema_registry_client(Registry()) == {"url": "https://registry:8081", "basic.auth.user.info": "u:p"}

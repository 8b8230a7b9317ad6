"""A secrets backend (AIRFLOW__SECRETS__BACKEND) that fails every connection lookup, naming the connection: a DAG
file parsed with it asks for none (tests/unit/test_dag_integrity.py)."""

from __future__ import annotations

from airflow.secrets import BaseSecretsBackend


class RefusingSecrets(BaseSecretsBackend):
    def get_conn_value(self, conn_id, team_name=None):
        raise RuntimeError(f"the DAG file asked for the connection {conn_id} while parsing")

    def get_connection(self, conn_id, team_name=None):
        raise RuntimeError(f"the DAG file asked for the connection {conn_id} while parsing")

    def get_variable(self, key, team_name=None):
        return None

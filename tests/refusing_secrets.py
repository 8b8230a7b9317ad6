"""A secrets backend (AIRFLOW__SECRETS__BACKEND) for parsing the DAG files with nothing reachable: it refuses every
connection and every variable but `streamfill_jobs_file`, the one a parse reads (tests/unit/test_dag_integrity.py),
and appends each name asked for to the file STREAMFILL_TEST_SECRETS_ASKED names.

It refuses with AirflowSecretsBackendAccessDenied: Airflow's lookup logs any other exception of a backend and goes
on to the next backend, so a plain error here would let the parse pass."""

from __future__ import annotations

import os

from airflow.sdk.exceptions import AirflowSecretsBackendAccessDenied
from airflow.secrets import BaseSecretsBackend

ASKED_FILE = "STREAMFILL_TEST_SECRETS_ASKED"
ALLOWED_VARIABLES = frozenset({"streamfill_jobs_file"})


def _record(kind: str, name: str) -> None:
    path = os.environ.get(ASKED_FILE)
    if path:
        with open(path, "a") as out:
            out.write(f"{kind} {name}\n")


class RefusingSecrets(BaseSecretsBackend):
    def get_conn_value(self, conn_id, team_name=None):
        _record("connection", conn_id)
        raise AirflowSecretsBackendAccessDenied(f"the DAG file asked for the connection {conn_id} while parsing")

    def get_connection(self, conn_id, team_name=None):
        _record("connection", conn_id)
        raise AirflowSecretsBackendAccessDenied(f"the DAG file asked for the connection {conn_id} while parsing")

    def get_variable(self, key, team_name=None):
        _record("variable", key)
        if key not in ALLOWED_VARIABLES:
            raise AirflowSecretsBackendAccessDenied(f"the DAG file asked for the variable {key} while parsing")
        return None

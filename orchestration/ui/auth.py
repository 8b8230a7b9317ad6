"""Who may read the page: Airflow's own login. Airflow mounts a plugin's FastAPI app without its own
authentication, so every route of the page depends on `require_reader`: a user Airflow authenticates (the JWT
in the `_token` cookie the UI sets at login, or an `Authorization: Bearer` token from POST /auth/token) who may
read DAG runs. No credential: 401; an invalid token or a user without that permission: 403."""

from __future__ import annotations

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, Request

_can_read_runs = requires_access_dag("GET", DagAccessEntity.RUN)


def require_reader(request: Request, user: GetUserDep) -> None:
    _can_read_runs(request, user)


READER = [Depends(require_reader)]

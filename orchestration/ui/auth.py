"""Who may read the page: Airflow's own login. Airflow mounts a plugin's FastAPI app without its own
authentication, so every route of the page depends on `require_reader`: a user Airflow authenticates (the JWT
in the `_token` cookie the UI sets at login, or an `Authorization: Bearer` token from POST /auth/token) who may
read DAG runs. No credential: 401; an invalid token or a user without that permission: 403. Which jobs the user
then sees is Airflow's answer per DAG (`AirflowReader`, used by access.Access); which DAGs a user may trigger,
the same question with POST (triggers.py)."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.configuration import conf
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
from fastapi import Depends, Request
from sqlalchemy import select

from streamfill.orchestration.ui.access import Access

_can_read_runs = requires_access_dag("GET", DagAccessEntity.RUN)


def require_reader(request: Request, user: GetUserDep) -> None:
    _can_read_runs(request, user)


READER = [Depends(require_reader)]


class AirflowReader:
    """One user's per-DAG answers from the API server's auth manager: reading a DAG's runs, as Airflow's own
    run list asks it."""

    def __init__(self, user) -> None:
        self.user = user
        self._every: bool | None = None

    def readable(self, dag_ids: set[str]) -> set[str]:
        return authorized(self.user, run_requests("GET", dag_ids))

    def reads_every_dag(self) -> bool:
        """Whether the user may read the runs of each DAG this Airflow has (and it has some)."""
        if self._every is None:
            self._every = every_dag(self.user, "GET")
        return self._every


def run_requests(method: str, dag_ids: set[str]) -> list[dict]:
    """The auth manager's questions about the runs of each DAG: reading them (GET) or triggering one (POST)."""
    return [{"method": method, "access_entity": DagAccessEntity.RUN, "details": DagDetails(id=dag_id, team_name=team)}
            for dag_id, team in _teams(dag_ids).items()]


def authorized(user, requests: list[dict]) -> set[str]:
    """The DAGs of `requests` the auth manager allows `user`."""
    manager = get_auth_manager()
    return {r["details"].id for r in requests
            if manager.is_authorized_dag(method=r["method"], access_entity=r["access_entity"], details=r["details"],
                                         user=user)}


def every_dag(user, method: str) -> bool:
    """Whether the auth manager allows `user` `method` on the runs of each DAG this Airflow has (and it has some).
    Auth managers have no question for "every DAG": FAB answers one without a DAG named as "may list DAGs"."""
    with create_session() as session:
        every = set(session.scalars(select(DagModel.dag_id)))
    return bool(every) and get_auth_manager().batch_is_authorized_dag(run_requests(method, every), user=user)


def _teams(dag_ids: set[str]) -> dict[str, str | None]:
    """Each DAG's team: an auth manager in multi-team mode decides per team; otherwise there are none."""
    teams = {}
    if dag_ids and conf.getboolean("core", "multi_team", fallback=False):
        teams = DagModel.get_dag_id_to_team_name_mapping(sorted(dag_ids))
    return {dag_id: teams.get(dag_id) for dag_id in sorted(dag_ids)}


def access(user: GetUserDep) -> Access:
    return Access(AirflowReader(user))


AccessDep = Annotated[Access, Depends(access)]

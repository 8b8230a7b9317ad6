"""Who triggered a DAG run, and which DAGs Airflow lets that user trigger: asked of the API server, where the auth
manager is, by the replay form's tasks (orchestration/replay_access.py), which run in a worker with neither
Airflow's database nor its auth manager. The answer comes from Airflow's own record of the run (its triggering
user and how it was triggered), never from what the caller says."""

from __future__ import annotations

from airflow.api_fastapi.app import get_auth_manager
from airflow.configuration import conf
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from sqlalchemy import select

from streamfill.errors import StreamfillError
from streamfill.orchestration.ui.auth import authorized, every_dag, run_requests


class NoSuchRun(StreamfillError, LookupError):
    """The run asked about is not in Airflow's database."""


class UnknownUsers(StreamfillError):
    """An auth manager streamfill cannot ask about a user by name."""


def answer(dag_id: str, run_id: str, dags: set[str]) -> dict:
    """replay_access.Trigger's fields for the run: its user, how it was triggered, and of `dags` those the user may
    trigger (POST on their runs, as Airflow's trigger asks it), and whether the user may trigger every DAG."""
    with create_session() as session:
        found = session.execute(select(DagRun.triggering_user_name, DagRun.triggered_by)
                                .where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).first()
    if found is None:
        raise NoSuchRun(f"Airflow has no run {run_id!r} of DAG {dag_id!r}")
    name, how = found
    out = {"dag_id": dag_id, "run_id": run_id, "user": name, "triggered_by": how.value if how else None,
           "known": False, "may_trigger": [], "every_dag": False, "note": ""}
    if name is None:
        return out
    try:
        user = user_named(name)
    except UnknownUsers as exc:
        return {**out, "note": str(exc)}
    if user is None:
        return {**out, "note": f"it has no active user {name!r}"}
    return {**out, "known": True, "may_trigger": sorted(authorized(user, run_requests("POST", dags))),
            "every_dag": every_dag(user, "POST")}


def user_named(name: str):
    """The auth manager's user of that name, as a request of theirs would carry it; None when it has no such active
    user. Auth managers have no lookup by name, so the two Airflow ships are asked their own way: FAB its user
    table (by the id its tokens carry), the simple auth manager its configured users."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = get_auth_manager()
    if isinstance(manager, SimpleAuthManager):
        if conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False):
            return SimpleAuthManagerUser(username=name, role="admin")  # every user is an admin there
        return next((u for u in manager.get_users() if u.username == name), None)
    try:
        from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager
        from airflow.providers.fab.auth_manager.models import User
    except ImportError:
        FabAuthManager = None
    if FabAuthManager is not None and isinstance(manager, FabAuthManager):
        with create_session() as session:
            user_id = session.scalar(select(User.id).where(User.username == name))
        if user_id is None:
            return None
        try:
            return manager.deserialize_user({"sub": str(user_id)})
        except ValueError:  # an inactive user
            return None
    raise UnknownUsers(f"streamfill asks only FAB and the simple auth manager about a user by name, not "
                       f"{type(manager).__name__}")

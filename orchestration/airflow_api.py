"""A small client of Airflow's REST API v2 (token login, trigger, wait, asset events), for `make demo`, the replay
form's access check and the tests. The announcements of a stream's commits do not use it: they are outlet events
of a task (orchestration/announce.py), which needs no user's password."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from streamfill.errors import AirflowError, AirflowUnreachable
from streamfill.settings import Settings
from streamfill.urls import without_password

__all__ = ["AirflowApi", "AirflowError"]


class AirflowApi:
    """Logged in as the local stack's admin (`settings.airflow_login`), or as the user and password given."""

    def __init__(self, settings: Settings | None, login: tuple[str, str] | None = None, *,
                 base: str | None = None) -> None:
        self.base = (base or f"http://{settings.host}:{settings.airflow_port}").rstrip("/")
        self.login = login or settings.airflow_login()
        body = json.dumps({"username": self.login[0], "password": self.login[1]}).encode()
        req = urllib.request.Request(f"{self.base}/auth/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                self.token = json.loads(resp.read())["access_token"]
        except urllib.error.HTTPError as exc:
            raise AirflowError(f"Airflow at {without_password(self.base)} refused the login of user "
                               f"{self.login[0]!r}: {exc}; check that user's password") from None
        except urllib.error.URLError as exc:
            raise AirflowUnreachable(f"cannot log in to Airflow at {without_password(self.base)}: {exc}. Start it "
                                     "with `streamfill stack up`") from None

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """A manual run; `logical_date` must be given in Airflow 3 (null: now)."""
        try:
            run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        except urllib.error.HTTPError as exc:
            raise AirflowError(f"triggering {dag_id} failed: HTTP {exc.code} {exc.read().decode()[:500]}") from None
        return run["dag_run_id"]

    def state(self, dag_id: str, run_id: str) -> str:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")["state"]

    def wait(self, dag_id: str, run_id: str, timeout: float = 1800,
             on_state: Callable[[str], None] | None = None) -> str:
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            state = self.state(dag_id, run_id)
            if state != last and on_state:
                on_state(state)
            last = state
            if state in ("success", "failed"):
                return state
            time.sleep(1)
        raise AirflowError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s; see the Airflow UI")

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused", {"is_paused": paused})

    def asset_id(self, uri: str) -> int | None:
        """The id of the asset with exactly this URI; None until a DAG that names it was parsed."""
        found = self.call("GET", f"/api/v2/assets?uri_pattern={urllib.parse.quote(uri)}&limit=100")
        return next((a["id"] for a in found.get("assets", []) if a["uri"] == uri), None)

    def asset_events(self, asset_id: int, since: str | None = None) -> list[dict]:
        """Every event of the asset (from `since`, an ISO time, on), oldest first."""
        out: list[dict] = []
        while True:
            query = f"asset_id={asset_id}&order_by=timestamp&limit=100&offset={len(out)}"
            if since:
                query += f"&timestamp_gte={urllib.parse.quote(since)}"
            page = self.call("GET", f"/api/v2/assets/events?{query}")["asset_events"]
            out += page
            if len(page) < 100:
                return sorted(out, key=lambda e: e["id"])

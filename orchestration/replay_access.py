"""Who may replay an entry through the replay form every entry shares (streamfill_replay), and into which table:
who may trigger or replay a job is who may use that job's DAGs (design.md section 10, invariant 6).

Airflow lets anyone who may trigger the form pick any entry and name any table. So the form's tasks ask Airflow,
before anything is recorded, who triggered their run and what Airflow lets that user trigger (the streamfill
page answers that in the API server, where the auth manager is: orchestration/ui/triggers.py), and decide here:

- a run a user triggered (the UI, the REST API, or a DAG of theirs through TriggerDagRunOperator) replays an
  entry only when that user may trigger the entry's stream DAG, the one that writes its table;
- and it writes one of the entry's own tables (its table, its windows' table, or the form's default
  `<table>_replay`), unless the user may trigger every DAG: who may launch every entry has no table beyond reach;
- a run no user triggered (a schedule, a TriggerDagRunOperator of such a run) and one Airflow's CLI started
  (`airflow dags trigger`, `airflow dags test`: run where Airflow's database credentials are) run as before.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
from dataclasses import dataclass

from streamfill import dag_ids
from streamfill.errors import REFUSAL, StreamfillError
from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.urls import without_password

# how Airflow records a run started by its own CLI (DagRunTriggeredByType): on a host with its database
HOST_TRIGGERS = frozenset({"cli", "test"})


class ReplayRefused(StreamfillError, PermissionError):
    """A replay its user may not run: the message names the user, the entry, the table and what to do."""

    kind = REFUSAL


@dataclass(frozen=True)
class Trigger:
    """Airflow's answer about one run: who triggered it and how, and what that user may trigger."""

    dag_id: str
    run_id: str
    user: str | None  # the run's triggering user; None when no user triggered it
    triggered_by: str | None  # Airflow's DagRunTriggeredByType value: ui, rest_api, operator, cli, test, ...
    known: bool = False  # the auth manager knows the user, so the two answers below are theirs
    may_trigger: frozenset[str] = frozenset()  # of the DAGs asked about, those the user may trigger
    every_dag: bool = False  # the user may trigger every DAG of this Airflow
    note: str = ""  # why the auth manager could not answer for the user

    @classmethod
    def from_json(cls, body: dict) -> Trigger:
        return cls(body["dag_id"], body["run_id"], body.get("user"), body.get("triggered_by"),
                   bool(body.get("known")), frozenset(body.get("may_trigger") or ()), bool(body.get("every_dag")),
                   body.get("note") or "")


def default_table(spec: PipelineSpec) -> str:
    """The form's target when its `table` is empty."""
    return f"{spec.table}_replay"


def own_tables(spec: PipelineSpec) -> list[str]:
    """The tables a replay of the entry may write for a user who may use its DAGs."""
    return list(dict.fromkeys([spec.table, spec.interval_target, default_table(spec)]))


def refusal(trigger: Trigger, spec: PipelineSpec, table: str) -> str | None:
    """Why the run may not replay entry `spec` into `table`, or None when it may."""
    if trigger.user is None or trigger.triggered_by in HOST_TRIGGERS:
        return None
    user, entry, stream = trigger.user, spec.name, dag_ids.stream(spec.name)
    run = f"{trigger.dag_id} run {trigger.run_id}"
    if not trigger.known:
        return (f"replay refused: user {user!r} triggered {run}, and Airflow's auth manager cannot answer for that "
                f"user ({trigger.note}), so it may not replay entry {entry!r} into table {table!r}. Trigger the run "
                "as a user of Airflow's own login, or run `streamfill backfill` where the job role's credentials are")
    if stream not in trigger.may_trigger and not trigger.every_dag:
        return (f"replay refused: user {user!r} may not trigger {stream}, the DAG that writes entry {entry!r}, so "
                f"may not replay that entry (into table {table!r}) from {run}. Replay an entry whose DAGs you may "
                f"trigger, or ask whoever manages Airflow's roles to let {user!r} trigger {stream}")
    if table not in own_tables(spec) and not trigger.every_dag:
        own = ", ".join(own_tables(spec))
        return (f"replay refused: user {user!r} may replay entry {entry!r} into its own tables only ({own}), not "
                f"into table {table!r} ({run}). Leave the form's table empty (it then writes "
                f"{default_table(spec)}) or name one of those; any other table needs a user who may trigger "
                "every DAG, or `streamfill backfill` where the job role's credentials are")
    return None


def check(trigger: Trigger, spec: PipelineSpec, table: str) -> None:
    problem = refusal(trigger, spec, table)
    if problem:
        raise ReplayRefused(problem)


def require(dag_run, spec: PipelineSpec, table: str) -> None:
    """In a task of the replay form: refuse the run unless its user may replay `spec` into `table`. A run no user
    triggered needs no question; any other asks Airflow's API (connection streamfill_airflow_api)."""
    if dag_run.triggering_user_name is None:
        return
    check(ask(dag_run.dag_id, dag_run.run_id, [dag_ids.stream(spec.name)]), spec, table)


def ask(dag_id: str, run_id: str, dags: list[str]) -> Trigger:
    """Airflow's answer about the run, from the streamfill page's route in the API server."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    from streamfill.orchestration.airflow_api import AirflowApi
    from streamfill.orchestration.connections import API_CONNECTION, api_base
    from streamfill.orchestration.ui import PREFIX, TRIGGER_ACCESS

    what = f"who triggered {dag_id} run {run_id}"
    fix = (f"the connection {API_CONNECTION} must name Airflow's API (host: its base URL) and a user who may read "
           "the runs of every DAG (docs/infrastructure.md)")
    try:
        conn = BaseHook.get_connection(API_CONNECTION)
    except AirflowNotFoundException:
        raise ReplayRefused(f"replay refused: cannot ask Airflow {what}: no connection {API_CONNECTION}; {fix}") \
            from None
    query = urllib.parse.urlencode({"dag_id": dag_id, "run_id": run_id, "dag": dags}, doseq=True)
    try:
        api = AirflowApi(None, (conn.login, conn.password), base=api_base(conn))
        return Trigger.from_json(api.call("GET", f"{PREFIX}{TRIGGER_ACCESS}?{query}"))
    except (StreamfillError, urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
        raise ReplayRefused(f"replay refused: asking Airflow's API at {without_password(api_base(conn))} {what} "
                            f"failed: {exc} {detail}; {fix}") from None

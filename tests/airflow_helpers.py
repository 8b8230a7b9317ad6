"""Waits on the running Airflow that more than one test file needs."""

from __future__ import annotations

import time
from contextlib import contextmanager

from streamfill import dag_ids
from streamfill.cli.stack.airflow import reserialize
from streamfill.orchestration.airflow_api import AirflowApi


def replay_form_offers(api: AirflowApi, settings, job: str, timeout: float = 180) -> None:
    """Parse the DAG files until the replay form's job list has `job`. Airflow skips writing a DAG whose last
    write is under `min_serialized_dag_update_interval` (30 s) old, and `airflow dags test` run with a jobs
    file of its own writes the form with that file's jobs: so one parse may not do."""
    deadline = time.monotonic() + timeout
    while True:
        reserialize(settings)
        offered = api.call("GET", f"/api/v2/dags/{dag_ids.REPLAY}/details")["params"]["job"]["schema"]["enum"]
        if job in offered:
            return
        assert time.monotonic() < deadline, f"the replay form offers {offered}, never {job!r}"
        time.sleep(3)


@contextmanager
def left_to_dags_test(settings, dag_id: str):
    """Pause an unpaused DAG while `airflow dags test` runs it here. Unpaused, the stack's scheduler also
    queues the test run's tasks for its own workers, whose failure to start a task already running marks the
    running task failed under it."""
    api = AirflowApi(settings)
    api.set_paused(dag_id, True)
    try:
        yield
    finally:
        api.set_paused(dag_id, False)

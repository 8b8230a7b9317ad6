"""What the processes of one test run share. `make test` runs the suite in pytest-xdist workers: the stack is
started by the first worker that needs it (the others wait for it), a test that stops or crashes a service of the
shared stack runs while no other integration test does, and the run's end (in the controller, after every worker
is done) removes what all workers' tests made and stops the stack if the run started it."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

# A test that stops, kills or crashes a service of the shared stack, or inspects the whole stack's processes.
WHOLE_STACK = "whole_stack"
# Tests that drive the stack's Airflow (its DAG folder, its scheduler, the page on its webserver) run one after
# another in one worker: they add and remove DAG files, count jobs on the page and share the demo job.
AIRFLOW_GROUP = "airflow"
# Tests of an Airflow of their own (a team's Airflow, the image's install): heavy, and apart from the stack's
# Airflow, so they run beside the group above, one after another in a worker of their own.
OWN_AIRFLOW_GROUP = "own_airflow"


def worker_index() -> int:
    """0 for the first xdist worker and for a run without workers."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def run_dir(tmp_path_factory) -> Path:
    """A directory every worker of this run sees (pytest's per-run temporary directory)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@contextmanager
def _flock(path: Path, mode: int):
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def one_at_a_time(directory: Path, name: str):
    """A lock the run's workers take in turn (starting the stack, building the class archive)."""
    with _flock(directory / f"{name}.lock", fcntl.LOCK_EX):
        yield


@contextmanager
def stack_use(directory: Path, whole: bool):
    """Shared use of the stack for an integration test, or use of the whole stack for a WHOLE_STACK test. A
    test waiting for the whole stack holds the gate, so tests starting after it wait too instead of keeping
    the stack shared forever."""
    gate, share = directory / "stack.gate", directory / "stack.lock"
    if whole:
        with _flock(gate, fcntl.LOCK_EX), _flock(share, fcntl.LOCK_EX):
            yield
        return
    with _flock(gate, fcntl.LOCK_EX):
        handle = open(share, "a")
        fcntl.flock(handle, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def merge(states: list[dict]) -> dict:
    """One run's state from its workers' states: whether one started the stack, the oldest offsets_db job id
    seen before tests ran, every name given out."""
    sinces = [state["since"] for state in states if state.get("since") is not None]
    return {"started": any(state.get("started", False) for state in states), "since": min(sinces, default=None),
            "issued": [name for state in states for name in state.get("issued", [])]}

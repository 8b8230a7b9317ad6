"""Jobs run the way a launch runs them, inside the test run's SparkSession."""

from __future__ import annotations

import traceback

import pytest


def run_here(jobs: str, job) -> tuple[int, str]:
    """One job run in the test run's SparkSession with `jobs` as the jobs file: (0, its summary) or (1, the
    error), as a launch's exit code and output."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STREAMFILL_JOBS_FILE", str(jobs))
        try:
            return 0, repr(job())
        except Exception:  # noqa: BLE001 - the test that needs this run shows it
            return 1, traceback.format_exc()

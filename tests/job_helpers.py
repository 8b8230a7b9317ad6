"""Jobs run the way a launch runs them, inside the test run's SparkSession."""

from __future__ import annotations

import textwrap
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


# the demo's orders columns and rules, for test entries that read demo events
_ORDERS_COLUMNS = """\
columns:
  event_id:   {type: string, required: true, max_length: 36}
  user_id:    {type: bigint, required: true, min: 1}
  event_type: {type: string, required: true, in: [view, cart, order, refund]}
  amount:     {type: "decimal(12,2)", required: true, min: 0, max: 100000}
  currency:   {type: string, required: true, in: [EUR, USD, GBP, CHF, JPY]}
  event_time: {type: timestamp, required: true}
quality:
  - expect_column_values_to_be_unique: {column: event_id}
"""


def orders_columns(indent: int) -> str:
    """The `columns:` and `quality:` of an entry reading demo events, indented to sit under its name."""
    return textwrap.indent(_ORDERS_COLUMNS, " " * indent)

"""Window and replay job names, and range merging for reconciliation (the jobs file: test_pipelines.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from offsets_db.reconcile import merge
from orchestration.tasks import replay_job, window_job

pytestmark = pytest.mark.unit


def test_window_and_replay_job_names_are_valid_stable_and_distinct():
    start = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    assert window_job("orders", start) == "orders.interval.20261122T1000"
    a = replay_job("orders", "earliest", "latest", "t")
    assert a == replay_job("orders", "earliest", "latest", "t")
    assert a != replay_job("orders", "earliest", "latest", "u") != replay_job("orders", "earliest", "2026", "t")
    from streamfill.names import validate_job_name

    assert validate_job_name(a) == a


def test_consumed_ranges_merge_per_partition():
    assert merge([("t", 0, 10, 20), ("t", 0, 0, 10), ("t", 1, 5, 6), ("t", 0, 15, 30), ("t", 0, 40, 40)]) == [
        ("t", 0, 0, 30), ("t", 1, 5, 6)]

"""The jobs file, window and replay job names, health rules' inputs and range merging for reconciliation."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from offsets_db.reconcile import merge
from orchestration import jobs_file as job_config
from orchestration.tasks import replay_job, window_job

pytestmark = pytest.mark.unit


def test_the_shipped_jobs_file_loads():
    jobs = job_config.load()
    assert set(jobs) == {"orders"}
    assert jobs["orders"].topic == "orders" and jobs["orders"].interval_table == "orders_hourly"


@pytest.mark.parametrize("body, message", [
    ("", "must have a `jobs:` mapping"),
    ("jobs: [a, b]", "must have a `jobs:` mapping"),
    ("jobs:\n  'bad name':\n    topic: t\n    table: x\n    interval_table: y\n", "job name 'bad name' is not valid"),
    ("jobs:\n  j:\n    table: x\n    interval_table: y\n", "topic\n  Field required"),
    ("jobs:\n  j:\n    topic: t\n    table: x\n    interval_table: y\n    colour: red\n", "colour\n  Extra inputs"),
    ("jobs:\n  j:\n    topic: t\n    table: x\n    interval_table: y\n    suite: other\n", "suite 'other' is not known"),
    ("jobs: {j: [", "cannot read the jobs file"),
])
def test_a_bad_jobs_file_names_the_job_and_the_field(tmp_path, body, message):
    path = tmp_path / "jobs.yaml"
    path.write_text(body)
    with pytest.raises(job_config.JobsFileError) as err:
        job_config.load(path)
    assert message in str(err.value)


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

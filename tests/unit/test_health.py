"""A stream's health: a commit too old is a problem unless the job stands at the log end (a quiet topic)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from streamfill.orchestration.stream_health import health_problems

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
AGE = timedelta(minutes=15)


def test_an_old_commit_with_records_left_is_a_problem_naming_the_age_and_the_dag():
    problems = health_problems("orders", NOW - timedelta(hours=2), 0, AGE, 1000, NOW)
    assert problems == ["job 'orders' last committed at 2026-11-28 10:00:00 UTC, 2:00:00 ago (threshold 0:15:00) "
                        "and has records left to read; check streamfill_stream__orders's log"]


def test_a_job_at_the_log_end_is_healthy_however_old_its_newest_commit_or_with_none():
    assert health_problems("orders", NOW - timedelta(days=3), 0, AGE, 1000, NOW, caught_up=True) == []
    assert health_problems("orders", None, None, AGE, 1000, NOW, caught_up=True) == []


def test_a_lag_past_the_threshold_is_a_problem_even_with_a_fresh_commit():
    problems = health_problems("orders", NOW - timedelta(minutes=1), 5000, AGE, 1000, NOW)
    assert len(problems) == 1 and "lags 5,000 offsets on its worst partition (threshold 1,000)" in problems[0]


def test_the_health_dag_runs_from_the_start_only_for_entries_that_ask_for_health(tmp_path, monkeypatch):
    from streamfill.spark_jobs.pipelines import read

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  watched:\n    topic: t\n    table: t\n    columns: {a: {type: int}}\n"
                    "    health: {max_commit_age_minutes: 5}\n"
                    "  plain:\n    topic: t\n    table: u\n    columns: {a: {type: int}}\n")
    entries = read(jobs)
    assert "health" in entries["watched"].model_fields_set and "health" not in entries["plain"].model_fields_set

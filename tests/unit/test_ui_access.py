"""Which jobs the streamfill page shows a user: the DAGs of each job, and the auth manager's per-DAG answers (a
stand-in here; Airflow's FAB auth manager in tests/integration/test_existing_airflow.py)."""

from __future__ import annotations

import os

import pytest

from streamfill import dag_ids
from streamfill.orchestration.ui.access import Access, dags_of
from streamfill.spark_jobs.pipelines import PipelineSpec

pytestmark = pytest.mark.unit

COLUMNS = {"id": {"type": "string"}}


def spec(name: str, topic: str | None = "t") -> PipelineSpec:
    if topic is None:
        return PipelineSpec(name=name, topics=["a", "b"], table=f"{name}_events", columns=COLUMNS)
    return PipelineSpec(name=name, topic=topic, table=f"{name}_events", columns=COLUMNS)


class Granted:
    """A user who may read the runs of the DAGs named (every DAG: `every`); counts the questions asked."""

    def __init__(self, *granted: str, every: bool = False) -> None:
        self.granted, self.every, self.asked = set(granted), every, []

    def readable(self, ids: set[str]) -> set[str]:
        self.asked.append(set(ids))
        return ids if self.every else ids & self.granted

    def reads_every_dag(self) -> bool:
        return self.every


SPECS = {"orders": spec("orders"), "payments": spec("payments"), "many": spec("many", topic=None)}


def test_a_jobs_dags_are_its_entrys_and_those_that_launched_it():
    assert dags_of("orders", SPECS, []) == {"streamfill_stream__orders", "streamfill_stream_health__orders",
                                            "streamfill_interval__orders", "streamfill_quality__orders",
                                            "streamfill_announce__orders"}
    assert dags_of("many", SPECS, []) == set(dag_ids.of_entry("many", False))  # no windows without one topic
    # windows, replays and backfills are named after their entry; the replay form every entry shares is not
    # one of a replay's DAGs (reading it would show every team's replays)
    assert dags_of("orders.replay.0123456789", SPECS, [dag_ids.REPLAY]) == dags_of("orders", SPECS, [])
    assert dags_of("orders.backfill.0123456789", SPECS, []) == dags_of("orders", SPECS, [])
    assert dags_of("adhoc-backfill", SPECS, []) == set()  # a CLI launch under a name of its own
    assert dags_of("orders.mine", SPECS, []) == set()  # a name of the user's that starts like an entry's
    assert dags_of("gone", SPECS, ["streamfill_stream__gone"]) == {"streamfill_stream__gone"}


def test_a_user_sees_the_jobs_of_the_dags_they_may_read_and_a_cli_job_only_with_every_dag():
    jobs = {"orders": {"streamfill_stream__orders"}, "orders.interval.20261122T1000": {"streamfill_interval__orders"},
            "payments": set(), "payments.replay.0123456789": {dag_ids.REPLAY}, "adhoc": set(),
            "gone": {"streamfill_stream__gone"}}
    orders_team = Granted(*dag_ids.of_entry("orders", True))
    assert Access(orders_team).visible(jobs, SPECS) == {"orders", "orders.interval.20261122T1000"}
    assert len(orders_team.asked) == 1  # one question for every job of the list
    quality_only = Granted(dag_ids.quality("payments"))  # one DAG of an entry is enough to see its jobs
    assert Access(quality_only).visible(jobs, SPECS) == {"payments", "payments.replay.0123456789"}
    replays = Granted(dag_ids.REPLAY)  # the shared replay form's runs show no entry's jobs
    assert Access(replays).visible(jobs, SPECS) == set()
    assert Access(Granted(every=True)).visible(jobs, SPECS) == set(jobs)
    assert Access(Granted()).visible(jobs, SPECS) == set()
    assert Access(Granted()).visible({}, SPECS) == set()


def test_the_jobs_file_is_the_airflow_variable_else_the_setting(tmp_path, monkeypatch):
    from streamfill.orchestration.jobs_file_variable import ENV, jobs_file, pin

    mine, theirs = tmp_path / "mine.yaml", tmp_path / "theirs.yaml"
    for path in (mine, theirs):
        path.write_text("jobs: {}\n")
    monkeypatch.setenv(ENV, str(theirs))
    monkeypatch.delenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", raising=False)
    assert jobs_file() == theirs
    monkeypatch.setenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", str(mine))  # a Variable from Airflow's environment
    assert jobs_file() == mine
    # pinned for the process: the task's own checks and the jobs it launches read the same file
    assert pin() == mine and os.environ[ENV] == str(mine)


def test_a_missing_jobs_file_names_where_its_path_came_from_and_the_variable_to_set(tmp_path, monkeypatch):
    from streamfill.orchestration.jobs_file_variable import ENV, jobs_file
    from streamfill.spark_jobs.pipelines import JobsFileError

    monkeypatch.setenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", str(tmp_path / "nowhere.yaml"))
    with pytest.raises(JobsFileError, match=r"no jobs file at .*nowhere.yaml \(the Airflow Variable "
                                            r"streamfill_jobs_file\); set the Airflow Variable streamfill_jobs_file"):
        jobs_file()
    monkeypatch.delenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE")
    monkeypatch.setenv(ENV, str(tmp_path / "gone.yaml"))
    with pytest.raises(JobsFileError, match=r"gone.yaml \(STREAMFILL_JOBS_FILE\)"):
        jobs_file()

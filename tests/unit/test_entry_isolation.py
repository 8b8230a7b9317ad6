"""One bad entry is one broken entry: the jobs file is read entry by entry, so the other entries load (and a
launch of one is not refused for another), `jobs check` names every broken entry, and a cron schedule is judged
as Airflow's timetables judge it."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from streamfill.spark_jobs import pipelines
from streamfill.spark_jobs.pipelines import JobsFileError, load, read

pytestmark = pytest.mark.unit

COLUMNS = "    columns: {a: {type: int}}\n"


def entry(name: str, extra: str = "") -> str:
    return f"  {name}:\n    topic: {name}\n    table: {name}_events\n{COLUMNS}" + "".join(
        f"    {line}\n" for line in extra.splitlines())


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


CRON_FIX = 'use five fields (minute hour day-of-month month day-of-week), e.g. "0 * * * *"'


@pytest.mark.parametrize("setting, shown", [
    ('schedule: "0 * * *"', "schedule = '0 * * *': is not a cron schedule Airflow accepts (Exactly 5, 6 or 7 "
                            "columns"),
    ('quality_schedule: "*/30 * * * * * * *"', "quality_schedule = '*/30 * * * * * * *': is not a cron schedule"),
    ('schedule: "0 25 * * *"', "schedule = '0 25 * * *': is not a cron schedule Airflow accepts ([0 25 * * *] is "
                               "not acceptable, out of range)"),
    ("schedule: '@every 5m'", "schedule = '@every 5m': is not a cron schedule"),
    ('schedule: "0 0 31 2 *"', "schedule = '0 0 31 2 *': never comes (no date matches it)"),
    ("health: {every_minutes: 90}", "health: health.every_minutes 90 is more than 60"),
])
def test_a_schedule_typo_names_the_file_the_job_the_field_the_value_and_the_fix(tmp_path, setting, shown):
    path = write(tmp_path / "jobs.yaml", "jobs:\n" + entry("p", setting))
    with pytest.raises(JobsFileError) as err:
        read(path)
    text = str(err.value)
    assert text.startswith(f"{path}: job 'p': ") and shown in text, text
    assert CRON_FIX in text or "use 1 to 60" in text, text


@pytest.mark.parametrize("schedule", ["@hourly", "@quarterly", "*/5 * * * *", "0 3 * * mon-fri", "0 0 L * *",
                                      "0 * * * * 30"])
def test_the_schedules_airflow_takes_are_taken(tmp_path, schedule):
    spec = read(write(tmp_path / "jobs.yaml", "jobs:\n" + entry("p", f"schedule: '{schedule}'")))["p"]
    assert spec.schedule == schedule


def test_jobs_check_refuses_every_cron_airflows_timetable_refuses():
    """The DAG processor validates each DAG's CronDataIntervalTimetable when it bags the DAG: whatever it refuses,
    the entry's check refuses before (it may refuse more: a date that never comes)."""
    from airflow.sdk import CronDataIntervalTimetable
    from airflow.sdk.definitions.timetables._cron import CRON_PRESETS

    from streamfill.errors import OptionError
    from streamfill.spark_jobs.pipelines.cron import PRESETS, check_cron

    assert PRESETS == CRON_PRESETS
    for expression in ["0 * * *", "* * * * * * * *", "60 * * * *", "*/0 * * * *", "0 * * * 8", "a b c d e",
                       "@every 5m", "@once", "@reboot", "", "0 0 1 1 * 0 2020", "@hourly", "@quarterly", "0 0 29 2 *",
                       "0 * * * * 30", "0 0 L * *", "1-5 * * * *", "*/61 * * * *"]:
        try:
            CronDataIntervalTimetable(expression, timezone="UTC").validate()
            airflow_takes = True
        except Exception:
            airflow_takes = False
        try:
            check_cron(expression, "schedule")
            we_take = True
        except OptionError:
            we_take = False
        assert we_take <= airflow_takes, (expression, we_take, airflow_takes)
        assert we_take == airflow_takes or expression == "0 0 1 1 * 0 2020", (expression, we_take, airflow_takes)


def test_one_broken_entry_leaves_every_other_entry_loaded(tmp_path):
    jobs = write(tmp_path / "jobs.yaml", "jobs:\n" + entry("good") + entry("typo", 'schedule: "0 * * *"')
                 + entry("lost", "colour: red") + entry("conn", 'postgres_conn_id: "my pg"'))
    write(tmp_path / "jobs.d" / "a.yaml", "jobs:\n" + entry("dropped"))
    write(tmp_path / "jobs.d" / "b.yaml", "jobs: {x: [")
    write(tmp_path / "jobs.d" / "c.yaml", "jobs:\n" + entry("good") + entry("also"))

    found = pipelines.load_each(jobs)
    assert set(found.specs) == {"good", "dropped", "also"}
    assert [(b.file.name, b.job) for b in found.broken] == [("jobs.yaml", "typo"), ("jobs.yaml", "lost"),
                                                            ("jobs.yaml", "conn"), ("b.yaml", None),
                                                            ("c.yaml", "good")]
    assert found.specs["good"].topic == "good"  # the first definition stays; the later one is the broken one
    said = [str(b.error) for b in found.broken]
    assert said[0].startswith(f"{jobs}: job 'typo': schedule = '0 * * *'"), said
    assert said[1].startswith(f"{jobs}: job 'lost': colour"), said
    assert said[2].startswith(f"{jobs}: job 'conn': postgres_conn_id = 'my pg'"), said  # no connection is looked up
    assert said[3].startswith(f"cannot read the jobs file {tmp_path / 'jobs.d' / 'b.yaml'}"), said
    assert said[4] == f"{tmp_path / 'jobs.d' / 'c.yaml'}: job 'good' is already defined in {jobs}; give it another name"

    with pytest.raises(JobsFileError) as err:  # the strict read names every broken entry, not just the first
        load(jobs)
    assert all(s in str(err.value) for s in said), str(err.value)


def test_a_launch_of_one_entry_is_not_refused_for_another_broken_one(tmp_path, monkeypatch):
    from streamfill.errors import OptionError

    jobs = write(tmp_path / "jobs.yaml", "jobs:\n" + entry("good") + entry("typo", 'quality_schedule: "*/30 * *"'))
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    assert pipelines.entry("good").table == "good_events"
    with pytest.raises(JobsFileError, match=r"job 'typo': quality_schedule = '\*/30 \* \*'"):
        pipelines.entry("typo", "--job")
    with pytest.raises(OptionError, match="use one of good, or add an entry"):
        pipelines.entry("nope")


def test_jobs_check_shows_the_entries_that_load_and_names_every_broken_one(tmp_path, monkeypatch):
    from streamfill.cli.commands.jobs import app

    monkeypatch.setenv("COLUMNS", "250")
    jobs = write(tmp_path / "jobs.yaml", "jobs:\n" + entry("good") + entry("typo", 'schedule: "0 * * *"')
                 + entry("late", "health: {every_minutes: 120}"))
    done = CliRunner().invoke(app, ["check", str(jobs)])
    assert done.exit_code == 2, done.output  # bad input: the jobs file (docs/operations.md#exit-codes)
    assert "job good: table good_events" in done.output, done.output
    assert "1 job(s) valid, 2 broken" in done.output, done.output
    assert f"{jobs}: job 'typo': schedule = '0 * * *': is not a cron schedule" in done.output, done.output
    assert f"{jobs}: job 'late': health" in done.output, done.output

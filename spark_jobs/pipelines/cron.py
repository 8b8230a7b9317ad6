"""An entry's cron schedules (`schedule`, `quality_schedule`, the health check's), judged as Airflow judges a DAG's
CronDataIntervalTimetable when the DAG processor bags the DAG: Airflow's presets resolved, then croniter, the parser
Airflow validates with. `streamfill jobs check` and the DAG files then refuse the same schedules, without importing
Airflow where an entry is read (a Spark driver, the CLI)."""

from __future__ import annotations

from datetime import datetime

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from streamfill.errors import OptionError

# Airflow's cron presets (airflow.sdk.definitions.timetables._cron.CRON_PRESETS), which croniter alone does not all
# know (@quarterly); tests/unit/test_entry_isolation.py keeps the two equal
PRESETS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}
CRON_FIX = ('use five fields (minute hour day-of-month month day-of-week), e.g. "0 * * * *" (hourly) or '
            f'"*/30 * * * *", or one of {", ".join(PRESETS)}; times are UTC')


def check_cron(value: str, option: str) -> str:
    """`value` if Airflow's timetable takes it and it comes at least once; else an OptionError naming it."""
    try:
        found = croniter(PRESETS.get(value, value))
    except (CroniterBadCronError, CroniterBadDateError) as exc:
        raise OptionError(option, value, f"is not a cron schedule Airflow accepts ({exc})", CRON_FIX) from None
    try:
        # Airflow's check takes a date that never comes (30 February); its timetable then fails when asked for the
        # next run
        found.get_next(datetime)
    except CroniterBadDateError:
        raise OptionError(option, value, "never comes (no date matches it)", CRON_FIX) from None
    return value

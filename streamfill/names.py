"""Name rules shared by every layer: job names (rows, staging-table names and file names carry them, so the
alphabet is small) and table names (`table` or `schema.table`, quoted wherever they reach SQL)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from streamfill.errors import OptionError

JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
JOB_NAME_RULE = "use 1 to 200 letters, digits, '_', '-' or '.', e.g. orders-stream"

PLAIN_NAME = r"^[a-z_][a-z0-9_]{0,62}$"  # a PostgreSQL role or schema name that needs no quotes


def validate_job_name(name: str, option: str = "job") -> str:
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise OptionError(option, name, f"job name {name!r} is not valid", JOB_NAME_RULE)
    return name


def parse_table(raw: str | None, option: str = "table") -> tuple[str | None, str]:
    """`table` or `schema.table`; quoting happens where SQL is built, so any name Postgres allows is fine."""
    if raw is None or not raw.strip():
        raise OptionError(option, raw, "is required: name the target table", "e.g. .option('table', 'orders')")
    parts = raw.strip().split(".")
    if len(parts) > 2 or any(not p or len(p) > 63 for p in parts):
        raise OptionError(option, raw, "is not a table name", "use 'table' or 'schema.table', each part 1 to 63 "
                                                              "characters")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def default_table(job: str) -> str:
    """A job's table when none is given: its name with `-` and `.` turned into `_`."""
    return re.sub(r"[-.]", "_", job)


WINDOW = "interval"  # the middle part of an interval window's job name: `<entry>.interval.<window start>`


def window_job(entry: str, start: datetime) -> str:
    """One backfill job per window of an entry, so a window's chunks resume and its re-runs are recognised."""
    return f"{entry}.{WINDOW}.{start.astimezone(timezone.utc):%Y%m%dT%H%M}"


def window_jobs_like() -> str:
    """A LIKE pattern of the job names `window_job` makes, its stamp included (a job named by hand may also hold
    `.interval.`)."""
    return f"%.{WINDOW}.________T____"

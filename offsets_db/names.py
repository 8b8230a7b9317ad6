"""Job names: they appear in offsets_db rows, staging-table names and file names, so the alphabet is small."""

from __future__ import annotations

import re

JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


def validate_job_name(name: str) -> str:
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise ValueError(f"job name {name!r} is not valid: use 1 to 200 letters, digits, '_', '-' or '.', "
                         "e.g. orders-stream")
    return name

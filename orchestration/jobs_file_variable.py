"""Which jobs file an Airflow environment uses: the Airflow Variable `streamfill_jobs_file` (metadata database,
AIRFLOW_VAR_STREAMFILL_JOBS_FILE or a secrets backend), else STREAMFILL_JOBS_FILE, else the checkout's
dags/streamfill_jobs.yaml. An Airflow that installed the wheel has no checkout, so it names its file here."""

from __future__ import annotations

import os
from pathlib import Path

from streamfill.spark_jobs.pipelines import JobsFileError
from streamfill.spark_jobs.pipelines import jobs_file as default_jobs_file

VARIABLE = "streamfill_jobs_file"
ENV = "STREAMFILL_JOBS_FILE"


def jobs_file() -> Path:
    from airflow.sdk import Variable

    chosen = Variable.get(VARIABLE, default=None)
    path = Path(chosen) if chosen else default_jobs_file()
    if not path.is_file():
        source = f"the Airflow Variable {VARIABLE}" if chosen else ENV if os.environ.get(ENV) else \
            f"the checkout's default: neither the Variable {VARIABLE} nor {ENV} is set"
        raise JobsFileError(f"no jobs file at {path} ({source}); set the Airflow Variable {VARIABLE} to your jobs "
                            "file's path (docs/infrastructure.md, \"Into your Airflow 3\")")
    return path


def pin() -> Path:
    """jobs_file(), set as STREAMFILL_JOBS_FILE of this process: the tasks' own checks and the jobs they launch
    (spark-submit gets this environment) then read the file the DAGs were made from."""
    path = jobs_file()
    os.environ[ENV] = str(path)
    return path

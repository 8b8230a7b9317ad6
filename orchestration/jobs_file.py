"""The jobs file behind the DAGs (`dags/streamfill_jobs.yaml`, or STREAMFILL_JOBS_FILE), validated once."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spark_jobs import pipelines
from streamfill import REPO_ROOT
from streamfill.errors import StreamfillError
from streamfill.names import validate_job_name


class Health(BaseModel):
    model_config = ConfigDict(extra="forbid")

    every_minutes: int = Field(5, ge=1)
    max_commit_age_minutes: int = Field(15, ge=1)
    max_lag: int = Field(500_000, ge=0)


class JobSpec(BaseModel):
    """One streaming job and its windows."""

    model_config = ConfigDict(extra="forbid")

    name: str
    topic: str = Field(min_length=1)
    table: str = Field(min_length=1)
    trigger: str = "10s"
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    interval_table: str = Field(min_length=1)
    schedule: str = "0 * * * *"
    quality_schedule: str = "*/30 * * * *"
    suite: str = "orders"
    health: Health = Health()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return validate_job_name(v)

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: str) -> str:
        pipelines.get(v)
        return v


class JobsFileError(StreamfillError, ValueError):
    """A jobs file that cannot be used: the message names the file, the job and the field."""


def jobs_file() -> Path:
    return Path(os.environ.get("STREAMFILL_JOBS_FILE") or REPO_ROOT / "dags" / "streamfill_jobs.yaml")


def load(path: Path | None = None) -> dict[str, JobSpec]:
    """The jobs file, plus one file per job in the `jobs.d/` folder beside it (a job added by dropping a file)."""
    path = path or jobs_file()
    out = _read(path, required=True)
    for extra in sorted((path.parent / "jobs.d").glob("*.yaml")):
        for name, spec in _read(extra, required=False).items():
            if name in out:
                raise JobsFileError(f"{extra}: job {name!r} is already defined in {path}; give it another name")
            out[name] = spec
    return out


def _read(path: Path, required: bool) -> dict[str, JobSpec]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise JobsFileError(f"cannot read the jobs file {path}: {exc}") from None
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    if not isinstance(jobs, dict) or (required and not jobs):
        raise JobsFileError(f"{path} must have a `jobs:` mapping of job name to its settings")
    out = {}
    for name, body in jobs.items():
        try:
            out[name] = JobSpec(name=name, **(body or {}))
        except (ValidationError, TypeError) as exc:
            raise JobsFileError(f"{path}: job {name!r}: {exc}") from None
    return out

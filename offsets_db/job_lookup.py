"""A job as offsets_db's statements name it: its name checked and its id looked up once per transaction, then
passed down to every step of that transaction."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from streamfill.errors import UnknownJob
from streamfill.names import validate_job_name
from streamfill.offsets_db.models import Job


@dataclass(frozen=True)
class ResolvedJob:
    """A job found in offsets_db: `name` for messages, `id` for statements."""

    name: str
    id: int


def find_job(s: Session, name: str) -> ResolvedJob | None:
    """The job named `name`, None when offsets_db has no such job (an invalid name raises)."""
    found = s.scalar(select(Job.id).where(Job.name == validate_job_name(name)))
    return None if found is None else ResolvedJob(name, found)


def resolve_job(s: Session, name: str) -> ResolvedJob:
    """The job named `name`; UnknownJob when offsets_db has no such job."""
    found = find_job(s, name)
    if found is None:
        raise UnknownJob(f"job {name!r} is not in offsets_db; it is created by its first run")
    return found

"""The asset event of an interval DAG's window run (keyed by the window's start, with what the window's job
committed in its extra), and the window's bounds as the backfill and the event read them."""

from __future__ import annotations

from datetime import datetime, timezone

from streamfill.errors import UnknownJob
from streamfill.offsets_db import revision
from streamfill.offsets_db.engine import make_engine


def window_event(db_url: str, entry: str, job: str, start: datetime, end: datetime) -> tuple[str, dict]:
    """(partition key, extra) of the asset event of a window's run: the window's start as the key, and what this
    pass of the window's job committed (rows, dead letters, offsets per partition), marked as a re-run from its
    second pass on."""
    from streamfill.offsets_db.announce_plan import WINDOW, WINDOW_KEY_FORMAT, to_extra
    from streamfill.offsets_db.announcements import newest_pass

    engine = make_engine(db_url)
    try:
        revision.require(engine)
        number, covered = newest_pass(engine, job)
    except UnknownJob:  # nothing recorded the window's job: nothing landed
        number, covered = 1, None
    finally:
        engine.dispose()
    key = start.astimezone(timezone.utc).strftime(WINDOW_KEY_FORMAT)
    return key, to_extra(WINDOW, job, covered, entry=entry, window={"start": iso(start), "end": iso(end)},
                         **{"pass": number, "rerun": number > 1})


def iso(when: datetime) -> str:
    """`when` in UTC, ISO-8601."""
    return when.astimezone(timezone.utc).isoformat()

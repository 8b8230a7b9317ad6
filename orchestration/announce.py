"""The announcement of a stream's commits, as a task of Airflow's hands it over: the commits offsets_db numbered
become asset events of the stream's table, at most one per `announce_every`, each covering the commits after the
previous one's, without gap or overlap (offsets_db/announcements.py keeps the state, offsets_db/announce_plan.py
the extra's shape).

The task (orchestration/announce_operator.py) gives Airflow each announcement as its outlet event, keyed
`commits:<job>:<n>`. Airflow stores a task's outlet events in the transaction that records the try's success,
and refuses both once the try is no longer running (it failed, it was cleared, it timed out): an event is in
Airflow exactly when the try that carried it succeeded. No user's password is involved: the task speaks to
Airflow with the token Airflow issued to that try.

So `next_announcement` records an announcement before it is sent, records every attempt before the task ends
with it, and looks an attempted one up among the asset's events by its uuid before anything else: found, it is
recorded delivered; not found, the try that carried it ended without storing it (Airflow runs one try of the
task at a time), and it is sent again, the same announcement. A crash of the task, of its worker, of the
triggerer, of Airflow or of PostgreSQL between any two steps neither loses nor repeats an announcement."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from streamfill import failpoints
from streamfill.datasets import PgTable
from streamfill.errors import ProtocolError
from streamfill.offsets_db import announcements, revision
from streamfill.offsets_db.announce_plan import EXTRA_KEY
from streamfill.offsets_db.announcements import Pending

log = logging.getLogger("streamfill.announce")

LOOKBACK = timedelta(hours=1)  # how far before an announcement's creation its event is looked for (clock skew)


def next_announcement(engine: Engine, job: str, every: timedelta, asset_uri: str,
                      stored: Callable[[Pending], int | None]) -> Pending | None:
    """The announcement this try of the task hands to Airflow, its attempt recorded; None while none is due.
    `stored(pending)` is the id of Airflow's event that carries the announcement, or None."""
    revision.require(engine)  # never announce from an offsets_db of another revision
    pending = announcements.pending(engine, job)
    if pending is not None and pending.attempts > 0:
        event = stored(pending)
        if event is not None:
            delivered(engine, job, asset_uri, pending, event)
            pending = None
        else:
            log.info("announcement %s of job %s was handed to Airflow by a try that did not succeed, and Airflow "
                     "has not stored it: sent again", pending.seq, job)
    if pending is None:
        pending = announcements.form(engine, job, every, asset_uri)
        if pending is None:
            return None
    if not announcements.attempting(engine, pending.id, pending.attempts):
        raise ProtocolError(f"announcement {pending.seq} of job {job} was attempted by another announcer while this "
                            "one looked it up: more than one Airflow (or DAG) announces this job. Keep the job's "
                            "entry in one Airflow; this try ends, a later one finds what the other stored")
    failpoints.hit("announce.attempting")
    return pending


def found(events: Iterable[Any], token: str) -> int | None:
    """The id of the asset event (Airflow's, with `id` and `extra`) that carries the announcement `token`."""
    return next((e.id for e in events if ((e.extra or {}).get(EXTRA_KEY) or {}).get("uuid") == token), None)


def looked_up_since(pending: Pending) -> datetime:
    """From when Airflow's events are searched for `pending`'s."""
    return pending.created_at - LOOKBACK


def delivered(engine: Engine, job: str, asset_uri: str, pending: Pending, event: int) -> None:
    """Record the announcement as delivered as asset event `event`, then tell lineage and the log."""
    announcements.delivered(engine, pending.id, event)
    body = pending.extra[EXTRA_KEY]
    _lineage(engine, job, asset_uri, body)
    log.info("announcement %s of job %s (commits %s-%s, %s rows, %s dead letters) is asset event %s", pending.seq,
             job, *body["commits"], body["rows"], body["dead_letters"], event)


def _lineage(engine: Engine, job: str, asset_uri: str, body: dict) -> None:
    """A RUNNING event of the stream's OpenLineage run for the commits announced (spark_jobs/lineage.py; off
    unless configured). Lineage is a view of the announcements: a lost one is not sent again."""
    from streamfill.spark_jobs import lineage

    run = announcements.lineage_run_of(engine, job, body["commits"][1])
    if run is not None and lineage.configured() is not None:
        lineage.running(job, run, (), (PgTable.of_asset_uri(asset_uri),), output_rows=body["rows"],
                        when=datetime.fromisoformat(body["committed"][1]))

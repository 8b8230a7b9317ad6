"""The announcer of a stream's commits: it turns the commits offsets_db numbered into asset events of the
stream's table, at most one per `announce_every`, each covering the commits after the previous one's, without
gap or overlap (offsets_db/announcements.py keeps the state, offsets_db/announce_plan.py the extra's shape).

Each event goes to Airflow's REST API (`POST /api/v2/assets/events`, keyed `commits:<job>:<n>`) as the user of
the connection `streamfill_airflow_api`. An announcement is recorded before it is sent, and every send attempt is
recorded before it leaves, by the job's one announcer (`announcements.holding`); one attempted but not known
delivered is first looked up among the asset's events by its token, so a crash of the announcer, of Airflow or of
PostgreSQL between any two steps neither loses nor repeats an announcement.

Airflow stores every event it is sent (it deduplicates none), and a send whose answer never came (a timeout, a
connection cut) may still be on its way: Airflow may store it after a lookup found nothing. Such a send is looked
up again, not repeated, until `resend_after` has passed; a send Airflow refused or never received is repeated at
once. Airflow's triggerer runs the announcer (orchestration/announcer_trigger.py); `run` does the same in a
process of its own."""

from __future__ import annotations

import logging
import math
import time
import urllib.error
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from streamfill import failpoints
from streamfill.datasets import PgTable
from streamfill.errors import AirflowError, UnknownJob
from streamfill.offsets_db import announcements, revision
from streamfill.offsets_db.announcements import Hold, Pending
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.orchestration.connections import API_CONNECTION

log = logging.getLogger("streamfill.announce")

POLL_S = 2.0  # how often a due announcer looks for new commits
LOOKBACK = timedelta(hours=1)  # how far before an announcement's creation its event is looked for (clock skew)
BACKOFF_S = (5.0, 60.0)  # after a failed step, doubling up to the second
OUTAGES = (AirflowError, urllib.error.URLError, OSError, DBAPIError, KeyError)  # a step failing so is tried again
# how long a send without an answer may still reach Airflow: until then it is looked up, not sent again
RESEND_AFTER = timedelta(minutes=5)


class Announcer:
    """One job's announcer. `api` logs in again after a failure (a token expired, Airflow restarted)."""

    def __init__(self, engine: Engine, api: Callable[[], AirflowApi], job: str, asset_uri: str,
                 every: timedelta, resend_after: timedelta = RESEND_AFTER) -> None:
        self.engine, self.api_factory, self.job, self.asset_uri, self.every = engine, api, job, asset_uri, every
        self.resend_after = resend_after
        self._api: AirflowApi | None = None
        self._asset: int | None = None
        # announcement id -> since when (monotonic) an attempt of it, unanswered and not found, may still land;
        # a process that finds one attempted by another process starts the wait when it first looks
        self._unanswered: dict[int, float] = {}

    def step(self, hold: Hold) -> float:
        """Deliver the pending announcement, or form and deliver the next; the seconds until the next step. Sends
        nothing unless `hold` still holds the job."""
        pending = announcements.pending(self.engine, self.job)
        if pending is None:
            pending = announcements.form(self.engine, self.job, self.every, self.asset_uri)
            if pending is None:
                return POLL_S
        api, asset = self._connected()
        if pending.attempts > 0:
            found = self._find(api, asset, pending)
            if found is not None:
                self._delivered(pending, found, "found in Airflow after an interrupted delivery")
                return 0.0
            if pending.id not in self._unanswered:  # attempted by another process, or before a restart
                self._unanswered[pending.id] = time.monotonic()
                log.info("announcement %s of job %s was sent without an answer and is not in Airflow: looked up, "
                         "not sent again, for %s", pending.seq, self.job, self.resend_after)
            left = self.resend_after.total_seconds() - (time.monotonic() - self._unanswered[pending.id])
            if left > 0:
                return min(left, BACKOFF_S[0])
        if not announcements.attempting(self.engine, pending.id, hold):
            return 0.0  # the hold is gone: `run` sees it and waits for the lock again
        failpoints.hit("announce.attempting")
        self._unanswered[pending.id] = time.monotonic()
        try:
            event = api.create_asset_event(asset, pending.extra, pending.partition_key)
        except Exception as exc:
            if _never_stored(exc):
                self._unanswered[pending.id] = -math.inf  # nothing of it can land: the next step sends again
            raise
        failpoints.hit("announce.posted")
        self._delivered(pending, event, "delivered")
        return 0.0

    def _lineage(self, pending: Pending) -> None:
        """A RUNNING event of the stream's OpenLineage run for the commits announced (spark_jobs/lineage.py; off
        unless configured). Lineage is a view of the announcements: a lost one is not sent again."""
        from streamfill.spark_jobs import lineage

        body = pending.extra["streamfill"]
        run = announcements.lineage_run_of(self.engine, self.job, body["commits"][1])
        if run is not None and lineage.configured() is not None:
            lineage.running(self.job, run, (), (PgTable.of_asset_uri(self.asset_uri),), output_rows=body["rows"],
                            when=datetime.fromisoformat(body["committed"][1]))

    def run(self, stop: Callable[[], bool] = lambda: False, sleep: Callable[[float], object] = time.sleep,
            retried: tuple[type[Exception], ...] = OUTAGES) -> None:
        """Steps until `stop()`, while this process holds the job's announcer lock (else it waits for it), checked
        before every step. A step, or the hold, failing with one of `retried` is recorded and tried again after a
        backoff; anything else ends the run."""
        failures, waiting_for_job = 0, False
        while not stop():
            try:
                with announcements.holding(self.engine, self.job) as hold:
                    if hold is not None:
                        revision.require(self.engine)  # never announce from an offsets_db of another revision
                    while hold is not None and not stop():
                        if not announcements.held(self.engine, hold):
                            log.warning("the announcer of job %s lost its lock (its PostgreSQL session ended); "
                                        "it waits to take it again", self.job)
                            break
                        try:
                            delay, failures = self.step(hold), 0
                        except retried as exc:
                            delay, failures = self.failed(exc, failures + 1), failures + 1
                        sleep(delay)
            except UnknownJob:  # its first launch creates it; nothing to announce until then
                if not waiting_for_job:
                    log.info("job %s has no commits yet (its first launch creates it): waiting", self.job)
                waiting_for_job = True
            except retried as exc:  # taking or checking the lock: PostgreSQL is away
                failures += 1
                sleep(self.failed(exc, failures))
                continue
            if not stop():
                sleep(POLL_S)

    def failed(self, exc: Exception, failures: int) -> float:
        """Record and log a failed step; the seconds to wait before trying again."""
        self._api = self._asset = None
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, urllib.error.HTTPError):
            text += f" {_quietly(lambda: exc.read().decode(errors='replace')[:500]) or ''}"
        if isinstance(exc, urllib.error.HTTPError) and exc.code in (401, 403):
            text += (f". Give the user of connection {API_CONNECTION} the right to create asset events "
                     "(docs/infrastructure.md)")
        pending = _quietly(lambda: announcements.pending(self.engine, self.job))
        if pending is not None:
            _quietly(lambda: announcements.failed(self.engine, pending.id, text))
        delay = min(BACKOFF_S[0] * 2 ** (failures - 1), BACKOFF_S[1])
        log.warning("announcing job %s's commits failed (%s); trying again in %.0f s", self.job, text, delay)
        return delay

    def _connected(self) -> tuple[AirflowApi, int]:
        if self._api is None:
            self._api = self.api_factory()
        if self._asset is None:
            self._asset = self._api.asset_id(self.asset_uri)
            if self._asset is None:
                raise AirflowError(f"Airflow has no asset {self.asset_uri}: the DAG file that declares it was not "
                                   "parsed yet, or the stream's table is not the one the connection names")
        return self._api, self._asset

    def _find(self, api: AirflowApi, asset: int, pending: Pending) -> int | None:
        since = (pending.created_at - LOOKBACK).isoformat()
        token = str(pending.token)
        return next((e["id"] for e in api.asset_events(asset, since)
                     if ((e.get("extra") or {}).get("streamfill") or {}).get("uuid") == token), None)

    def _delivered(self, pending: Pending, event: int, how: str) -> None:
        """Record the announcement as delivered as asset event `event`, then tell lineage and the log."""
        announcements.delivered(self.engine, pending.id, event)
        self._unanswered.pop(pending.id, None)
        self._lineage(pending)
        body = pending.extra["streamfill"]
        log.info("announcement %s of job %s (commits %s-%s, %s rows, %s dead letters) %s as asset event %s",
                 pending.seq, self.job, *body["commits"], body["rows"], body["dead_letters"], how, event)


def _never_stored(exc: Exception) -> bool:
    """Whether a send that failed so certainly left no event: Airflow refused it, or nothing listened."""
    if isinstance(exc, urllib.error.HTTPError):
        return 400 <= exc.code < 500
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, ConnectionRefusedError)


def _quietly(call: Callable):
    try:
        return call()
    except Exception:  # recording a failure must not hide the failure itself
        return None

"""The announcer of a stream's commits: it turns the commits offsets_db numbered into asset events of the
stream's table, at most one per `announce_every`, each covering the commits after the previous one's, without
gap or overlap (offsets_db/announcements.py keeps the state, offsets_db/announce_plan.py the extra's shape).

Each event goes to Airflow's REST API (`POST /api/v2/assets/events`, keyed `commits:<n>`) as the user of the
connection `streamfill_airflow_api`. An announcement is recorded before it is sent, and every send attempt is
recorded before it leaves; one attempted but not known delivered is first looked up among the asset's events by
its token, so a crash of the announcer, of Airflow or of PostgreSQL between any two steps neither loses nor
repeats an announcement. Airflow's triggerer runs it (orchestration/announcer_trigger.py); `run` does the same
in a process of its own."""

from __future__ import annotations

import logging
import time
import urllib.error
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from offsets_db import announcements
from offsets_db.announcements import Pending
from orchestration.airflow_api import AirflowApi
from orchestration.connections import API_CONNECTION
from streamfill import failpoints
from streamfill.datasets import PgTable
from streamfill.errors import AirflowError

log = logging.getLogger("streamfill.announce")

POLL_S = 2.0  # how often a due announcer looks for new commits
LOOKBACK = timedelta(hours=1)  # how far before an announcement's creation its event is looked for (clock skew)
BACKOFF_S = (5.0, 60.0)  # after a failed step, doubling up to the second
OUTAGES = (AirflowError, urllib.error.URLError, OSError, DBAPIError, KeyError)  # a step failing so is tried again


class Announcer:
    """One job's announcer. `api` logs in again after a failure (a token expired, Airflow restarted)."""

    def __init__(self, engine: Engine, api: Callable[[], AirflowApi], job: str, asset_uri: str,
                 every: timedelta) -> None:
        self.engine, self.api_factory, self.job, self.asset_uri, self.every = engine, api, job, asset_uri, every
        self._api: AirflowApi | None = None
        self._asset: int | None = None

    def step(self) -> float:
        """Deliver the pending announcement, or form and deliver the next; the seconds until the next step."""
        pending = announcements.pending(self.engine, self.job)
        if pending is None:
            pending = announcements.form(self.engine, self.job, self.every, self.asset_uri)
            if pending is None:
                return POLL_S
        api, asset = self._connected()
        if pending.attempts > 0:
            found = self._find(api, asset, pending)
            if found is not None:
                announcements.delivered(self.engine, pending.id, found)
                self._said(pending, found, "found in Airflow after an interrupted delivery")
                return 0.0
        announcements.attempting(self.engine, pending.id)
        failpoints.hit("announce.attempting")
        event = api.create_asset_event(asset, pending.extra, pending.partition_key)
        failpoints.hit("announce.posted")
        announcements.delivered(self.engine, pending.id, event)
        self._said(pending, event, "delivered")
        return 0.0

    def _lineage(self, pending: Pending) -> None:
        """A RUNNING event of the stream's OpenLineage run for the commits announced (spark_jobs/lineage.py; off
        unless configured). Lineage is a view of the announcements: a lost one is not sent again."""
        from spark_jobs import lineage

        body = pending.extra["streamfill"]
        run = announcements.lineage_run_of(self.engine, self.job, body["commits"][1])
        if run is not None and lineage.configured() is not None:
            lineage.running(self.job, run, (), (PgTable.of_asset_uri(self.asset_uri),), output_rows=body["rows"],
                            when=datetime.fromisoformat(body["committed"][1]))

    def run(self, stop: Callable[[], bool] = lambda: False, sleep: Callable[[float], object] = time.sleep,
            retried: tuple[type[Exception], ...] = OUTAGES) -> None:
        """Steps until `stop()`, while this process holds the job's announcer lock (else it waits for it). A step
        failing with one of `retried` is recorded and tried again after a backoff; anything else ends the run."""
        failures = 0
        while not stop():
            with announcements.holding(self.engine, self.job) as mine:
                while mine and not stop():
                    try:
                        delay, failures = self.step(), 0
                    except retried as exc:
                        delay, failures = self.failed(exc, failures + 1), failures + 1
                    sleep(delay)
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

    def _said(self, pending: Pending, event: int, how: str) -> None:
        self._lineage(pending)
        body = pending.extra["streamfill"]
        log.info("announcement %s of job %s (commits %s-%s, %s rows, %s dead letters) %s as asset event %s",
                 pending.seq, self.job, *body["commits"], body["rows"], body["dead_letters"], how, event)


def _quietly(call: Callable):
    try:
        return call()
    except Exception:  # noqa: BLE001 - recording a failure must not hide the failure itself
        return None

"""A detached stream's supervision on Airflow's triggerer (docs/airflow.md, "Streams off the Airflow workers"): the
stream task defers to this trigger once its launch has started the query on a Spark Connect server, so no worker
slot is held while the stream runs. The trigger looks at offsets_db every few seconds, one statement: whether a
live session holds the job's lease (the query's source holds it for the query's life) and the newest commit; and
at the entry in the jobs file the task read it from (the triggerer has neither the Airflow Variable that names
the file nor the task's environment, so the task hands the path over). It fires once, when the query is gone (it
failed, was stopped, or its server went) or the entry changed; the task then restarts the stream (after a
backoff) or follows the entry, and defers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from streamfill.orchestration.connections import POSTGRES_CONNECTION

log = logging.getLogger(__name__)

GONE, ENTRY_CHANGED = "gone", "entry changed"  # what a TriggerEvent's `state` says
EVERY_S = 10.0  # between two looks
# a query just started takes its lease at its first planning: until the supervision has seen it held, a free lease
# says nothing for this long
START_GRACE_S = 120.0


class StreamSupervision(BaseTrigger):
    """Watches `job`'s detached run `run_id`, started at `started` (Unix time), whose entry was `entry_json` (the
    entry as the launch read it; None: not watched), read from `jobs_file` (None: STREAMFILL_JOBS_FILE or the
    checkout's)."""

    def __init__(self, job: str, run_id: int, started: float, entry_json: str | None = None,
                 pipeline: str | None = None, postgres_conn_id: str = POSTGRES_CONNECTION,
                 every_s: float = EVERY_S, jobs_file: str | None = None) -> None:
        super().__init__()
        self.job, self.run_id, self.started, self.entry_json = job, run_id, started, entry_json
        self.pipeline, self.postgres_conn_id, self.every_s = pipeline, postgres_conn_id, every_s
        self.jobs_file = jobs_file

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job": self.job, "run_id": self.run_id, "started": self.started, "entry_json": self.entry_json,
                 "pipeline": self.pipeline, "postgres_conn_id": self.postgres_conn_id, "every_s": self.every_s,
                 "jobs_file": self.jobs_file})

    async def run(self):
        from airflow.sdk import BaseHook

        from streamfill.offsets_db.engine import make_engine
        from streamfill.orchestration.connections import postgres_url

        db = await BaseHook.aget_connection(self.postgres_conn_id)
        engine = make_engine(postgres_url(db))
        try:
            self._seen_held = False
            while True:
                event = await asyncio.to_thread(self._look, engine)
                if event is not None:
                    yield TriggerEvent(event)
                    return
                await asyncio.sleep(self.every_s)
        finally:
            engine.dispose()

    def _look(self, engine) -> dict | None:
        """What fires the trigger, if anything: the query gone, or the entry changed. offsets_db out of reach is
        no news about the stream: the next look asks again."""
        from streamfill.offsets_db import queries
        from streamfill.offsets_db.engine import OffsetsDbUnreachable, reaching

        try:
            with reaching(str(engine.url)):
                live = queries.liveness(engine, self.job)
        except OffsetsDbUnreachable as exc:
            log.warning("stream %s: offsets_db out of reach (%s); looking again in %.0f s", self.job, exc,
                        self.every_s)
            return None
        last = live.last_commit.isoformat() if live.last_commit else None
        ours = live.held and live.run_id == self.run_id
        self._seen_held = getattr(self, "_seen_held", False) or ours
        # held by another run (a launch from a terminal took the job over), or free once the query held it, or
        # still free past the start's grace: this run's query is gone
        if (live.held and not ours) or (not live.held and (self._seen_held or
                                                           time.time() - self.started > START_GRACE_S)):
            return {"state": GONE, "job": self.job, "run_id": self.run_id, "last_commit": last}
        changed = self._entry_changed()
        if changed is not None:
            return {"state": ENTRY_CHANGED, "job": self.job, "run_id": self.run_id, "last_commit": last,
                    "change": changed}
        return None

    def _entry_changed(self) -> str | None:
        """The entry read again from the task's jobs file, when it differs from the one the stream runs."""
        if self.entry_json is None:
            return None
        from pathlib import Path

        from streamfill.spark_jobs.pipelines import load_each

        try:
            entries = load_each(Path(self.jobs_file) if self.jobs_file else None)
            now = entries.spec(self.pipeline or self.job).model_dump_json()
        except Exception as exc:  # noqa: BLE001 - an entry being edited: the running one stays, said once a look
            log.warning("stream %s: its entry cannot be read now (%s); the stream runs on as it is", self.job, exc)
            return None
        return "the jobs file's entry changed" if now != self.entry_json else None

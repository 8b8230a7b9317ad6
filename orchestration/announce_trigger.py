"""The wait of a job's announce task on Airflow's triggerer: it fires when the task has work (offsets_db/
announce_due.py), so no worker is held while commits are awaited. It has no side effect: it may run twice, be
cancelled or be lost with its triggerer, and the task then waits again; what is announced is decided on the
worker (orchestration/announce.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from streamfill.orchestration.connections import POSTGRES_CONNECTION

log = logging.getLogger("streamfill.announce")

POLL_S = 2.0  # how often a waiting task looks for new commits
BACKOFF_S = (5.0, 60.0)  # after offsets_db failed to answer, doubling up to the second
# the longest wait before the task looks again on a worker: a trigger whose DAG was removed meanwhile ends by then
MAX_WAIT_S = 600.0


class AnnouncementDue(BaseTrigger):
    """Fires `{"job": job, "due": bool}` when the job's next announcement (or a look at the one in flight) is due,
    `due` False after `max_wait_s` without."""

    def __init__(self, job: str, every_s: float, postgres_conn_id: str = POSTGRES_CONNECTION,
                 max_wait_s: float = MAX_WAIT_S) -> None:
        super().__init__()
        self.job, self.every_s, self.postgres_conn_id, self.max_wait_s = job, every_s, postgres_conn_id, max_wait_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job": self.job, "every_s": self.every_s, "postgres_conn_id": self.postgres_conn_id,
                 "max_wait_s": self.max_wait_s})

    async def run(self):
        from airflow.sdk import BaseHook

        from streamfill.offsets_db.announce_due import wait_s
        from streamfill.offsets_db.engine import make_engine
        from streamfill.orchestration.connections import postgres_url

        engine = make_engine(postgres_url(await BaseHook.aget_connection(self.postgres_conn_id)), pool_size=1)
        every, deadline, failures = timedelta(seconds=self.every_s), time.monotonic() + self.max_wait_s, 0
        try:
            while time.monotonic() < deadline:
                try:
                    wait, failures = await asyncio.to_thread(wait_s, engine, self.job, every), 0
                except Exception as exc:  # offsets_db out of reach: the wait goes on
                    failures += 1
                    wait = min(BACKOFF_S[0] * 2 ** (failures - 1), BACKOFF_S[1])
                    log.warning("job %s: offsets_db did not answer (%s: %s); asking again in %.0f s", self.job,
                                type(exc).__name__, exc, wait)
                if wait == 0:
                    yield TriggerEvent({"job": self.job, "due": True})
                    return
                await asyncio.sleep(min(POLL_S if wait is None else wait, max(deadline - time.monotonic(), 0)))
            yield TriggerEvent({"job": self.job, "due": False})
        finally:
            engine.dispose()

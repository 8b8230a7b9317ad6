"""The committed-through sensor's wait, on Airflow's triggerer: it looks at offsets_db (and, for a time, the
broker) every `poll_interval` seconds until the job's commits cover the point (orchestration/committed_through.py),
without holding a worker slot. A refusal (a point that cannot be read, a connection Airflow lacks) ends the wait
with an event the sensor fails on; an outage (offsets_db or the broker out of reach) is logged and looked at again."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from streamfill.kafka_client import KAFKA_CONNECTION
from streamfill.orchestration.connections import POSTGRES_CONNECTION

COVERED, REFUSED = "covered", "refused"  # the event's status


class CommittedThroughTrigger(BaseTrigger):
    """Fires once `job`'s commits cover `offsets`, `time` or `other_job`'s position (exactly one given)."""

    def __init__(self, job: str, offsets: dict | None = None, time: str | None = None, other_job: str | None = None,
                 postgres_conn_id: str = POSTGRES_CONNECTION, kafka_conn_id: str = KAFKA_CONNECTION,
                 poll_interval: float = 30.0) -> None:
        super().__init__()
        self.job, self.offsets, self.time, self.other_job = job, offsets, time, other_job
        self.postgres_conn_id, self.kafka_conn_id, self.poll_interval = postgres_conn_id, kafka_conn_id, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job": self.job, "offsets": self.offsets, "time": self.time, "other_job": self.other_job,
                 "postgres_conn_id": self.postgres_conn_id, "kafka_conn_id": self.kafka_conn_id,
                 "poll_interval": self.poll_interval})

    async def run(self):
        from airflow.sdk import BaseHook

        from streamfill.orchestration.committed_through import Through, as_json, coverage
        from streamfill.orchestration.connections import kafka_client, postgres_url
        from streamfill.orchestration.failures import refused
        from streamfill.orchestration.offsets_hook import StreamfillOffsetsHook

        hook = None
        try:
            through = Through.of(self.job, self.offsets, self.time, self.other_job)
            db = await BaseHook.aget_connection(self.postgres_conn_id)
            kafka = kafka_client(await BaseHook.aget_connection(self.kafka_conn_id)) if through.time else None
            hook = StreamfillOffsetsHook(self.postgres_conn_id, url=postgres_url(db))
            while True:
                try:
                    # offsets_db's and the broker's clients block: off the triggerer's event loop
                    found = await asyncio.to_thread(coverage, hook, through, kafka)
                except Exception as exc:
                    if refused(exc):
                        raise
                    self.log.warning("job %s: %s; looking again in %s s", self.job, exc, self.poll_interval)
                else:
                    if found.covered:
                        yield TriggerEvent({"status": COVERED, "job": self.job, "point": through.describe(),
                                            "position": as_json(found.position)})
                        return
                    self.log.info("job %s has not committed through %s yet: %s", self.job, through.describe(),
                                  "; ".join(found.left))
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            if not refused(exc):
                raise
            yield TriggerEvent({"status": REFUSED, "job": self.job, "message": str(exc)})
        finally:
            if hook is not None:
                hook.close()

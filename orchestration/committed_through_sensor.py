"""A sensor that waits until a job's commits cover a point: offsets, a time, or another job's position
(orchestration/committed_through.py). Deferrable by default: the wait runs on Airflow's triggerer
(CommittedThroughTrigger), its first look at once, and holds no worker slot; `deferrable=False` pokes from a
worker instead. Returns where the job stood, `{topic: {partition: next offset}}`.

    CommittedThroughSensor(task_id="stream_caught_up", job="orders", other_job="{{ ti.xcom_pull('backfill') }}")
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseHook, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException

from streamfill.kafka_client import KAFKA_CONNECTION
from streamfill.orchestration.committed_through import POINTS, Through, as_json, coverage
from streamfill.orchestration.committed_through_trigger import COVERED, CommittedThroughTrigger
from streamfill.orchestration.connections import POSTGRES_CONNECTION, kafka_client
from streamfill.orchestration.failures import NOT_RETRIED, classed, refused
from streamfill.orchestration.offsets_hook import StreamfillOffsetsHook


class CommittedThroughSensor(BaseSensorOperator):
    """Waits until `job`'s commits in offsets_db (the connection `postgres_conn_id`) cover exactly one of
    `offsets` ({topic: {partition: offset}}), `time` (ISO-8601; the broker of `kafka_conn_id` gives its offsets)
    or `other_job`'s position. Each is templated."""

    template_fields = ("job", *POINTS)

    def __init__(self, *, job: str, offsets: Any = None, time: Any = None, other_job: str | None = None,
                 postgres_conn_id: str = POSTGRES_CONNECTION, kafka_conn_id: str = KAFKA_CONNECTION,
                 deferrable: bool = True, poke_interval: float = 30, **kwargs) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        if sum(value is not None for value in (offsets, time, other_job)) != 1:
            raise ValueError(f"{type(self).__name__} {kwargs.get('task_id')}: give exactly one of offsets, time "
                             "and other_job (the point the job's commits must cover)")
        self.job, self.offsets, self.time, self.other_job = job, offsets, time, other_job
        self.postgres_conn_id, self.kafka_conn_id, self.deferrable = postgres_conn_id, kafka_conn_id, deferrable

    def _through(self) -> Through:
        with classed():
            return Through.of(self.job, self.offsets, self.time, self.other_job)

    def execute(self, context) -> Any:
        through = self._through()  # a point that cannot be read fails here, before any wait
        if not self.deferrable:
            return super().execute(context)
        point = through.kwargs()
        self.defer(trigger=CommittedThroughTrigger(point["job"], point["offsets"], point["time"], point["other_job"],
                                                   self.postgres_conn_id, self.kafka_conn_id, self.poke_interval),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def poke(self, context) -> Any:
        through = self._through()
        hook = StreamfillOffsetsHook(self.postgres_conn_id)
        try:
            with classed():
                kafka = kafka_client(BaseHook.get_connection(self.kafka_conn_id)) if through.time else None
                found = coverage(hook, through, kafka)
        except AirflowFailException:
            raise
        except Exception as exc:
            if refused(exc):
                raise
            self.log.warning("job %s: %s; looking again", through.job, exc)  # an outage: the next poke may pass
            return False
        finally:
            hook.close()
        if not found.covered:
            self.log.info("job %s has not committed through %s yet: %s", through.job, through.describe(),
                          "; ".join(found.left))
            return False
        self.log.info("job %s committed through %s", through.job, through.describe())
        return PokeReturnValue(True, as_json(found.position))

    def execute_complete(self, context, event: dict) -> dict:
        if event.get("status") != COVERED:
            raise AirflowFailException(f"{event.get('message')} ({NOT_RETRIED})")
        self.log.info("job %s committed through %s", event["job"], event["point"])
        return event["position"]

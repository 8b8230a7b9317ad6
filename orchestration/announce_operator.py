"""The task that announces a stream's commits as asset events of its table, with no user's password: each run
hands Airflow one announcement as its outlet event, and Airflow stores it with the try's success
(orchestration/announce.py says why that is exactly once).

A run starts on the triggerer, waiting without a worker until an announcement is due (AnnouncementDue), then on a
worker records, looks up and hands over the announcement; with nothing due it waits again. Its DAG runs
continuously, one run at a time, so the next run waits for the next announcement as soon as one is stored.

    from datetime import datetime, timedelta, timezone

    from airflow.sdk import DAG, Asset
    from streamfill.orchestration.announce_operator import StreamfillAnnounceOperator

    # a continuous DAG needs a start date (any past one): orchestration/dags.py says why
    with DAG("orders_announce", schedule="@continuous", max_active_runs=1, catchup=False,
             start_date=datetime(2025, 1, 1, tzinfo=timezone.utc)):
        StreamfillAnnounceOperator(task_id="announce", job="orders",
                                   asset=Asset("postgres://db:5432/streamfill/public/orders_events"),
                                   every=timedelta(minutes=1))
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator
from airflow.triggers.base import StartTriggerArgs

from streamfill.orchestration.announce_trigger import AnnouncementDue
from streamfill.orchestration.connections import POSTGRES_CONNECTION


class StreamfillAnnounceOperator(BaseOperator):
    """Announces job `job`'s commits on `asset` (the table it writes), at most one announcement per `every`, reading
    offsets_db through the postgres connection `postgres_conn_id`. Its outlet and inlet are `asset`: Airflow shows
    the task as the asset's producer, and the task reads the asset's events to find an announcement handed over by
    a try that did not live to see it stored."""

    ui_color = "#d6eaf8"
    start_from_trigger = True

    def __init__(self, *, job: str, asset: Asset, every: timedelta,
                 postgres_conn_id: str = POSTGRES_CONNECTION, **kwargs: Any) -> None:
        super().__init__(inlets=[asset], outlets=[asset], **kwargs)
        self.job, self.asset, self.every, self.postgres_conn_id = job, asset, every, postgres_conn_id
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{AnnouncementDue.__module__}.{AnnouncementDue.__qualname__}",
            trigger_kwargs=self._wait().serialize()[1], next_method="execute_complete", next_kwargs=None,
            timeout=None)

    def _wait(self) -> AnnouncementDue:
        return AnnouncementDue(self.job, self.every.total_seconds(), self.postgres_conn_id)

    def execute(self, context: Any) -> None:
        self._announce(context)

    def execute_complete(self, context: Any, event: dict | None = None) -> None:
        self._announce(context)

    def _announce(self, context: Any) -> None:
        from airflow.sdk import BaseHook

        from streamfill.errors import UnknownJob
        from streamfill.offsets_db.announce_plan import EXTRA_KEY
        from streamfill.offsets_db.engine import make_engine
        from streamfill.orchestration.announce import found, looked_up_since, next_announcement
        from streamfill.orchestration.connections import postgres_url
        from streamfill.orchestration.failures import classed

        def stored(pending) -> int | None:
            events = context["inlet_events"][self.asset].after(looked_up_since(pending).isoformat())
            return found(events, str(pending.token))

        engine = make_engine(postgres_url(BaseHook.get_connection(self.postgres_conn_id)), pool_size=1)
        try:
            with classed():
                try:
                    pending = next_announcement(engine, self.job, self.every, self.asset.uri, stored)
                except UnknownJob:  # its first launch creates it; nothing to announce until then
                    pending = None
        finally:
            engine.dispose()
        if pending is None:
            self.defer(trigger=self._wait(), method_name="execute_complete")
        outlet = context["outlet_events"][self.asset]
        outlet.extra = pending.extra
        outlet.add_partitions(pending.partition_key)
        body = pending.extra[EXTRA_KEY]
        self.log.info("announcing %s: commits %s-%s, %s rows, %s dead letters", pending.partition_key,
                      *body["commits"], body["rows"], body["dead_letters"])

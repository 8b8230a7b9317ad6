"""The announcer inside Airflow: a trigger that Airflow's triggerer runs for as long as a DAG schedules on the
stream's table asset (an AssetWatcher of that asset, orchestration/assets.py). It never fires a TriggerEvent of
its own: those carry no partition key and are neither deduplicated nor kept across a triggerer's crash. It
delivers through orchestration/announce.py instead, which records every step in offsets_db."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseEventTrigger

from orchestration.connections import API_CONNECTION, POSTGRES_CONNECTION


class CommitAnnouncer(BaseEventTrigger):
    def __init__(self, job: str, asset_uri: str, every_s: float, postgres_conn_id: str = POSTGRES_CONNECTION,
                 api_conn_id: str = API_CONNECTION) -> None:
        super().__init__()
        self.job, self.asset_uri, self.every_s = job, asset_uri, every_s
        self.postgres_conn_id, self.api_conn_id = postgres_conn_id, api_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job": self.job, "asset_uri": self.asset_uri, "every_s": self.every_s,
                 "postgres_conn_id": self.postgres_conn_id, "api_conn_id": self.api_conn_id})

    async def run(self):
        from airflow.sdk import BaseHook

        db = await BaseHook.aget_connection(self.postgres_conn_id)
        api = await BaseHook.aget_connection(self.api_conn_id)
        stop = threading.Event()

        def announce() -> None:
            # in a thread, so importing, the lock, the steps and their waits never block the triggerer's event
            # loop; every failure is retried, since a trigger that ends leaves the job unannounced until a restart
            from offsets_db.engine import make_engine
            from orchestration.airflow_api import AirflowApi
            from orchestration.announce import Announcer
            from orchestration.connections import postgres_url

            base = api.host if "://" in (api.host or "") else f"http://{api.host}:{api.port or 8080}"
            engine = make_engine(postgres_url(db))
            announcer = Announcer(engine, lambda: AirflowApi(None, (api.login, api.password), base=base), self.job,
                                  self.asset_uri, timedelta(seconds=self.every_s))
            try:
                announcer.run(stop=stop.is_set, sleep=stop.wait, retried=(Exception,))
            finally:
                engine.dispose()

        try:
            await asyncio.to_thread(announce)
        finally:
            stop.set()  # the triggerer cancelled the watcher: the thread ends at its next check
        yield  # a watcher's trigger is an async generator; it never gets here

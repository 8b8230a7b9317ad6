"""The announcer inside Airflow: a trigger that Airflow's triggerer runs for as long as a DAG schedules on a
table's asset (the AssetWatcher of that asset, orchestration/assets.py). It announces the commits of every job
that writes the table, each job by its own Announcer in a thread of its own. It never fires a TriggerEvent of its
own: those carry no partition key and are neither deduplicated nor kept across a triggerer's crash. It delivers
through orchestration/announce.py instead, which records every step in offsets_db."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseEventTrigger

from streamfill.orchestration.connections import API_CONNECTION, POSTGRES_CONNECTION, api_base


class CommitAnnouncer(BaseEventTrigger):
    """`announce_every`: each job writing the table at `asset_uri`, with the seconds between its announcements."""

    def __init__(self, asset_uri: str, announce_every: dict[str, float], postgres_conn_id: str = POSTGRES_CONNECTION,
                 api_conn_id: str = API_CONNECTION) -> None:
        super().__init__()
        self.asset_uri, self.announce_every = asset_uri, dict(sorted(announce_every.items()))
        self.postgres_conn_id, self.api_conn_id = postgres_conn_id, api_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"asset_uri": self.asset_uri, "announce_every": self.announce_every,
                 "postgres_conn_id": self.postgres_conn_id, "api_conn_id": self.api_conn_id})

    async def run(self):
        from airflow.sdk import BaseHook

        db = await BaseHook.aget_connection(self.postgres_conn_id)
        api = await BaseHook.aget_connection(self.api_conn_id)
        stop = threading.Event()

        def announce(job: str, every_s: float) -> None:
            # every failure is retried: a trigger that ends leaves the table unannounced until a restart
            from streamfill.offsets_db.engine import make_engine
            from streamfill.orchestration.airflow_api import AirflowApi
            from streamfill.orchestration.announce import Announcer
            from streamfill.orchestration.connections import postgres_url

            base = api_base(api)
            engine = make_engine(postgres_url(db))
            announcer = Announcer(engine, lambda: AirflowApi(None, (api.login, api.password), base=base), job,
                                  self.asset_uri, timedelta(seconds=every_s))
            try:
                announcer.run(stop=stop.is_set, sleep=stop.wait, retried=(Exception,))
            finally:
                engine.dispose()

        await in_threads([lambda job=job, every_s=every_s: announce(job, every_s)
                          for job, every_s in self.announce_every.items()], stop)
        yield  # a watcher's trigger is an async generator; it never gets here


async def in_threads(calls: Sequence[Callable[[], None]], stop: threading.Event) -> None:
    """Each call in a thread of its own, so importing, locks, steps and waits never block the triggerer's event
    loop; returns when every call has returned, and sets `stop` when it returns or is cancelled (the triggerer
    cancelled the watcher: each call ends at its next check). Not the loop's default executor: its few threads
    serve every trigger of the triggerer, and a call that runs for good would hold one for good."""
    loop = asyncio.get_running_loop()
    ended = [loop.create_future() for _ in calls]

    def body(call: Callable[[], None], future: asyncio.Future) -> None:
        outcome: BaseException | None = None
        try:
            call()
        except BaseException as exc:  # handed to the awaiting coroutine, which raises it
            outcome = exc

        def complete_future() -> None:
            """The call's outcome as the future's, unless the awaiting coroutine was cancelled meanwhile."""
            if future.done():
                return
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)

        try:
            loop.call_soon_threadsafe(complete_future)
        except RuntimeError:
            pass  # the loop is closed: the triggerer is gone, and nothing awaits

    for call, future in zip(calls, ended, strict=True):
        threading.Thread(target=body, args=(call, future), daemon=True, name="streamfill-announcer").start()
    try:
        await asyncio.gather(*ended)
    finally:
        stop.set()

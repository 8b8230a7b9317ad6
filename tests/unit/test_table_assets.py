"""The assets of the DAG file as Airflow collects them (its own AssetModelOperation.collect, which keeps one Asset
per (name, uri) of a file): every job writing a table keeps its announcer, a downstream DAG's file gives the table
the same watcher, and the announcers of every table run however many tables there are."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

pytestmark = pytest.mark.unit

ENTRIES = """\
jobs:
  orders_eu:
    topic: orders-eu
    table: orders
    announce_every: 10s
    columns: {id: {type: string}}
  orders_us:
    topic: orders-us
    table: public.orders
    columns: {id: {type: string}}
  refunds:
    topic: refunds
    table: refunds
    columns: {id: {type: string}}
"""

DOWNSTREAM = """\
from airflow.sdk import DAG, IdentityMapper, PartitionedAssetTimetable
from airflow.providers.standard.operators.empty import EmptyOperator
from streamfill.orchestration import downstream

with DAG("orders_report", schedule=PartitionedAssetTimetable(assets=downstream.stream_asset("orders_us"),
                                                              default_partition_mapper=IdentityMapper())) as dag:
    EmptyOperator(task_id="report")
"""


@pytest.fixture
def airflow_env(monkeypatch, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(ENTRIES)
    monkeypatch.setenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", str(jobs))
    monkeypatch.setenv("STREAMFILL_ASSETS_DATABASE", "postgres://db:5432/streamfill")
    return tmp_path


def _collected(dags: dict) -> dict:
    """What Airflow records of a DAG file's assets: (name, uri) -> the kwargs of each watcher's trigger."""
    from airflow.dag_processing.collection import AssetModelOperation
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    found = AssetModelOperation.collect({k: LazyDeserializedDAG.from_dag(d) for k, d in dags.items()}).assets
    return {key: [(w.name, {k: _plain(v) for k, v in w.trigger["kwargs"].items()}) for w in asset.watchers]
            for key, asset in found.items()}


def _plain(value):
    """A trigger's kwarg as given: Airflow 3.2 keeps a dict wrapped in its serialization's {"__var", "__type"}."""
    return value.get("__var", value) if isinstance(value, dict) and "__type" in value else value


def test_jobs_writing_one_table_keep_one_announcer_of_both_and_a_downstream_file_declares_it_alike(airflow_env):
    from streamfill.orchestration.dags import build

    collected = _collected(build())
    orders, refunds = (f"postgres://db:5432/streamfill/public/{t}" for t in ("orders", "refunds"))
    assert collected[(orders, orders)] == [("streamfill_announcer", {
        "asset_uri": orders, "announce_every": {"orders_eu": 10.0, "orders_us": 60.0},
        "postgres_conn_id": "streamfill_postgres", "api_conn_id": "streamfill_airflow_api"})]
    assert [w[1]["announce_every"] for w in collected[(refunds, refunds)]] == [{"refunds": 60.0}]
    assert collected[(f"{orders}_intervals",) * 2] == []

    # Airflow gives the asset the watchers of the file it parsed last: a downstream DAG's file must agree
    namespace: dict = {}
    exec(compile(DOWNSTREAM, str(airflow_env / "orders_report.py"), "exec"), namespace)
    assert _collected({"orders_report": namespace["dag"]}) == {(orders, orders): collected[(orders, orders)]}


def test_the_announcers_of_more_tables_than_the_event_loops_default_threads_all_run(monkeypatch):
    """asyncio's default executor has min(32, cpus + 4) threads for every trigger of a triggerer; an announcer runs
    for good, so it must not hold one of them."""
    from airflow.sdk import BaseHook

    from streamfill.offsets_db import engine
    from streamfill.orchestration import announce, connections
    from streamfill.orchestration.announcer_trigger import CommitAnnouncer

    tables = min(32, (os.cpu_count() or 1) + 4) + 2
    running: set[str] = set()
    lock = threading.Lock()

    async def connection(conn_id):
        return type("Conn", (), {"host": "airflow", "port": 8080, "login": "u", "password": "p"})()

    def run(self, stop, sleep, retried):  # an announcer stepping until the watcher is cancelled
        with lock:
            running.add(self.job)
        while not stop():
            sleep(0.05)

    monkeypatch.setattr(BaseHook, "aget_connection", staticmethod(connection))
    monkeypatch.setattr(engine, "make_engine", lambda url: type("E", (), {"dispose": lambda s: None})())
    monkeypatch.setattr(connections, "postgres_url", lambda conn: "postgresql://db/streamfill")
    monkeypatch.setattr(announce.Announcer, "run", run)

    async def triggerer() -> int:
        watchers = [asyncio.create_task(anext(CommitAnnouncer(f"postgres://db:5432/streamfill/public/t{i}",
                                                              {f"job{i}": 1.0}).run()))
                    for i in range(tables)]
        deadline = time.monotonic() + 20
        while len(running) < tables and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        return len(running)

    assert asyncio.run(triggerer()) == tables, f"only {len(running)} of {tables} tables' announcers ran"


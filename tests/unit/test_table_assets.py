"""The assets of the DAG file as Airflow collects them (its own AssetModelOperation.collect, which keeps one Asset
per (name, uri) of a file) and the announce DAG as Airflow's scheduler reads it back: a table's asset is a plain
one, so a team's file that declares `Asset(uri)` changes nothing of streamfill's; the commits are announced by a
task whose outlet is the table, starting on the triggerer; and the trigger it waits with fires when offsets_db
says so, however long offsets_db is away."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

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

# a team's DAG on the table, declaring its asset by the URI alone, as any asset is declared
DOWNSTREAM = """\
from airflow.sdk import DAG, Asset, IdentityMapper, PartitionedAssetTimetable
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("orders_report", schedule=PartitionedAssetTimetable(
        assets=Asset("postgres://db:5432/streamfill/public/orders"), default_partition_mapper=IdentityMapper())) as dag:
    EmptyOperator(task_id="report")
"""
ORDERS = "postgres://db:5432/streamfill/public/orders"


@pytest.fixture
def airflow_env(monkeypatch, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(ENTRIES)
    monkeypatch.setenv("AIRFLOW_VAR_STREAMFILL_JOBS_FILE", str(jobs))
    monkeypatch.setenv("STREAMFILL_ASSETS_DATABASE", "postgres://db:5432/streamfill")
    return tmp_path


def _collected(dags: dict) -> dict:
    """What Airflow records of a DAG file's assets: (name, uri) -> the names of its watchers."""
    from airflow.dag_processing.collection import AssetModelOperation
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    found = AssetModelOperation.collect({k: LazyDeserializedDAG.from_dag(d) for k, d in dags.items()}).assets
    return {key: [w.name for w in asset.watchers] for key, asset in found.items()}


def test_a_tables_asset_is_declared_alike_by_streamfills_file_and_a_teams_file_and_carries_no_watcher(airflow_env):
    from streamfill.orchestration.dags import build

    collected = _collected(build())
    refunds = "postgres://db:5432/streamfill/public/refunds"
    assert collected[(ORDERS, ORDERS)] == [] and collected[(refunds, refunds)] == []
    assert collected[(f"{ORDERS}_intervals",) * 2] == []
    namespace: dict = {}
    exec(compile(DOWNSTREAM, str(airflow_env / "orders_report.py"), "exec"), namespace)
    assert _collected({"orders_report": namespace["dag"]}) == {(ORDERS, ORDERS): []}


def test_each_entry_announces_through_a_continuous_dag_whose_task_starts_on_the_triggerer_with_the_table_as_outlet(
        airflow_env):
    from airflow.serialization.serialized_objects import DagSerialization

    from streamfill import dag_ids
    from streamfill.orchestration.dags import build

    dags = build()
    for job, every in (("orders_eu", 10.0), ("orders_us", 60.0)):
        # as the scheduler and the triggerer read the DAG: from its serialized form
        dag = DagSerialization.from_dict(DagSerialization.to_dict(dags[dag_ids.announce(job)]))
        (task,) = dag.tasks
        assert (dag.timetable.summary, dag.max_active_runs) == ("@continuous", 1)
        assert len(set(_run_dates(dag, 3))) == 3, "two runs with one logical date: the second is never created"
        assert [(o.name, o.uri) for o in task.outlets] == [(ORDERS, ORDERS)]
        assert task.start_from_trigger is True
        args = task.start_trigger_args
        assert (args.trigger_cls, args.next_method) == (
            "streamfill.orchestration.announce_trigger.AnnouncementDue", "execute_complete")
        kwargs = args.trigger_kwargs.get("__var", args.trigger_kwargs)
        assert {k: v for k, v in kwargs.items() if k != "max_wait_s"} == {
            "job": job, "every_s": every, "postgres_conn_id": "streamfill_postgres"}


def _run_dates(dag, n: int) -> list:
    """The logical dates the scheduler gives the DAG's first `n` runs, as it asks its timetable."""
    from airflow.timetables.base import TimeRestriction

    restriction, last, dates = TimeRestriction(earliest=dag.start_date, latest=None, catchup=False), None, []
    for _ in range(n):
        info = dag.timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        dates.append(info.logical_date)
        last = info.data_interval
    return dates


def _fired(monkeypatch, answers: list, max_wait_s: float = 30.0) -> tuple[dict, list[float]]:
    """The trigger run as the triggerer runs it, offsets_db answering `answers` in turn (an exception is raised);
    what it fired and how long it slept between answers."""
    from airflow.sdk import BaseHook

    from streamfill.offsets_db import announce_due, engine
    from streamfill.orchestration import announce_trigger, connections
    from streamfill.orchestration.announce_trigger import AnnouncementDue

    answers, slept = list(answers), []

    async def connection(conn_id):
        return SimpleNamespace(conn_id=conn_id)

    def wait_s(engine, job, every):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(BaseHook, "aget_connection", staticmethod(connection))
    monkeypatch.setattr(connections, "postgres_url", lambda conn: "postgresql://db/streamfill")
    monkeypatch.setattr(engine, "make_engine", lambda url, **kw: SimpleNamespace(dispose=lambda: None))
    monkeypatch.setattr(announce_due, "wait_s", wait_s)
    monkeypatch.setattr(announce_trigger.asyncio, "sleep", sleep)

    async def first_event():
        return await anext(AnnouncementDue("orders", 10.0, max_wait_s=max_wait_s).run())

    return asyncio.run(first_event()).payload, slept


def test_the_wait_fires_when_offsets_db_says_the_announcement_is_due_and_rides_out_an_outage(monkeypatch):
    from sqlalchemy.exc import OperationalError

    down = OperationalError("SELECT 1", {}, Exception("server closed the connection"))
    fired, slept = _fired(monkeypatch, [None, 7.5, down, down, 0.0])
    assert fired == {"job": "orders", "due": True}
    assert slept[:2] == [2.0, 7.5] and slept[2:] == [5.0, 10.0]  # then backing off while offsets_db is away


def test_the_wait_ends_undue_after_its_longest_wait(monkeypatch):
    fired, _ = _fired(monkeypatch, [None] * 1000, max_wait_s=0.0)
    assert fired == {"job": "orders", "due": False}

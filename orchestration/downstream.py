"""For DAGs that run when streamfill's data lands (a report, a dbt run, an export): the assets of an entry's
tables, the streamfill part of the events that triggered a run, and the rows those events cover.

    from airflow.sdk import DAG, Asset, IdentityMapper, PartitionedAssetTimetable, task
    from streamfill.orchestration import downstream

    orders = Asset("postgres://db:5432/streamfill/public/orders_events")  # or downstream.stream_asset("orders")
    with DAG("orders_report", schedule=PartitionedAssetTimetable(assets=orders,
                                                                  default_partition_mapper=IdentityMapper())):
        @task
        def report():
            for event in downstream.triggering_events():  # one per run: its partition key is commits:<job>:<n>
                rows = connection.execute(downstream.rows_in("orders_events", event["offsets"]))

streamfill's events carry a partition key (the window's start, or `commits:<job>:<n>`): Airflow gives keyed events
to DAGs scheduled with PartitionedAssetTimetable, one run per key, and not to plain `schedule=[asset]` DAGs. A
table written by several entries gets the announcements of each (`event["job"]` says whose). The assets are plain
ones: declare a table's asset by its URI, or take it from here, which names it from the entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

from streamfill.names import parse_table
from streamfill.offsets_db.announce_plan import from_extra
from streamfill.orchestration import assets
from streamfill.orchestration.jobs_file_variable import pin
from streamfill.spark_jobs.pipelines import PipelineSpec, load_each


def stream_asset(name: str) -> Asset:
    """The asset of entry `name`'s stream table: an event per announcement of the commits of each entry writing it."""
    return assets.table_asset(assets.database_url(), _entry(name).table)


def windows_asset(name: str) -> Asset:
    """The asset of entry `name`'s interval table: an event per window run."""
    return assets.table_asset(assets.database_url(), _entry(name).interval_target)


def _entry(name: str) -> PipelineSpec:
    """Entry `name` of the jobs file Airflow uses; another entry's being broken does not stop this DAG file."""
    return load_each(pin()).spec(name, "entry")


def triggering_events(context: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The streamfill part of every asset event that triggered this run (offsets_db.announce_plan.to_extra)."""
    if context is None:
        from airflow.sdk import get_current_context

        context = get_current_context()
    found = []
    for events in context["triggering_asset_events"].values():
        found += [body for body in (from_extra(e.extra) for e in events) if body is not None]
    return found


def rows_in(table: str, offsets: Mapping[str, Mapping[str, list[list[int]]]], *columns: str):
    """A SQLAlchemy SELECT of `columns` (default: the coordinates) of `table`'s rows from the offsets an event
    covers; every value is a bound parameter."""
    from sqlalchemy import and_, column, false, or_, select
    from sqlalchemy import table as sql_table

    schema, name = parse_table(table)
    coordinates = ("topic", "partition", "offset")
    t = sql_table(name, *(column(c) for c in dict.fromkeys((*coordinates, *columns))), schema=schema)
    spans = [and_(t.c.topic == topic, t.c.partition == int(partition), t.c.offset >= start, t.c.offset < end)
             for topic, parts in offsets.items() for partition, ranges in parts.items() for start, end in ranges]
    return select(*(t.c[c] for c in (columns or coordinates))).where(or_(*spans) if spans else false())

"""The Airflow Assets of the pipeline entries: each stream's table and each windows' table, named by the PostgreSQL
URI Airflow's postgres provider uses (`postgres://host:port/database/schema/table`, streamfill/datasets.py), so
a DAG that declares the same table by that URI, `Asset("postgres://...")`, schedules on the same asset.

They are plain assets: streamfill's events of a table come from the outlets of its tasks (the announce task of
each entry writing it, the windows' task), never from a watcher of the asset, so any DAG file may declare the
table's asset as it likes.

The database part of the URIs is the setting STREAMFILL_ASSETS_DATABASE (streamfill/settings.py): naming them
reads no connection, variable or database (a parse reads only the Variable streamfill_jobs_file, for the entries)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow.sdk import Asset

from streamfill.datasets import PgTable
from streamfill.settings import get_settings
from streamfill.spark_jobs.pipelines import PipelineSpec


@dataclass(frozen=True)
class EntryAssets:
    stream: Asset  # the stream's table: an event per announcement of its commits, keyed commits:<job>:<n>
    windows: Asset | None  # the interval DAG's table: an event per window run; None without a single topic


def database_url() -> str:
    """The database that names the tables' assets (STREAMFILL_ASSETS_DATABASE and its defaults)."""
    return get_settings().assets_database_url


def of_entries(specs: Iterable[PipelineSpec], db_url: str) -> dict[str, EntryAssets]:
    """The assets of every entry, by entry name. Entries writing one table share its asset."""
    return {spec.name: EntryAssets(table_asset(db_url, spec.table),
                                   table_asset(db_url, spec.interval_target) if spec.windowed else None)
            for spec in specs}


def table_asset(db_url: str, table: str) -> Asset:
    """The asset of `table` in the database `db_url`, as anyone declares it: `Asset(uri)`."""
    return Asset(PgTable.of(db_url, table).asset_uri)

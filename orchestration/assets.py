"""The Airflow Assets of the pipeline entries: each stream's table and each windows' table, named by the PostgreSQL
URI Airflow's postgres provider uses (`postgres://host:port/database/schema/table`, streamfill/datasets.py), so
a DAG that declares the same table by that URI schedules on the same asset.

A table streamed into carries one watcher, which announces the commits of every entry writing it (its keys name
the job: offsets_db.announce_plan.commits_key). One per table, and the same in every DAG file that declares the
table: Airflow keeps one Asset per (name, uri) of a DAG file, watchers included, and parsing a file that declares
the asset with other watchers (or none) replaces the asset's watchers with that file's. A downstream DAG takes
its asset from orchestration/downstream.py, which asks here.

The database part of the URIs is the setting STREAMFILL_ASSETS_DATABASE (streamfill/settings.py): parsing a DAG
file reads no connection, variable or database for it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow.sdk import Asset

from streamfill.datasets import PgTable
from streamfill.settings import get_settings
from streamfill.spark_jobs.pipelines import PipelineSpec

WATCHER = "streamfill_announcer"  # the name of a table's watcher in Airflow (one per asset)


@dataclass(frozen=True)
class EntryAssets:
    stream: Asset  # the stream's table: an event per announcement of its commits, keyed commits:<job>:<n>
    windows: Asset | None  # the interval DAG's table: an event per window run; None without a single topic


def database_url() -> str:
    """The database that names the tables' assets (STREAMFILL_ASSETS_DATABASE and its defaults)."""
    return get_settings().assets_database_url


def of_entries(specs: Iterable[PipelineSpec], db_url: str) -> dict[str, EntryAssets]:
    """The assets of every entry, by entry name. Entries writing one table share its asset and its watcher."""
    specs = list(specs)
    every = _announced(specs, db_url)
    return {spec.name: EntryAssets(_asset(_uri(db_url, spec.table), every),
                                   _asset(_uri(db_url, spec.interval_target), every) if spec.windowed
                                   else None)
            for spec in specs}


def table_asset(specs: Iterable[PipelineSpec], db_url: str, table: str) -> Asset:
    """The asset of `table`, with the watcher that announces the commits of each of `specs` streaming into it."""
    return _asset(_uri(db_url, table), _announced(specs, db_url))


def _announced(specs: Iterable[PipelineSpec], db_url: str) -> dict[str, dict[str, float]]:
    """Table URI -> each job streaming into it -> the seconds between its announcements."""
    every: dict[str, dict[str, float]] = {}
    for spec in specs:
        every.setdefault(_uri(db_url, spec.table), {})[spec.name] = spec.announce_every_s
    return every


def _asset(uri: str, every: dict[str, dict[str, float]]) -> Asset:
    return Asset(name=uri, uri=uri, watchers=[_watcher(uri, every[uri])] if uri in every else [])


def _uri(db_url: str, table: str) -> str:
    return PgTable.of(db_url, table).asset_uri


def _watcher(uri: str, announce_every: dict[str, float]):
    from airflow.sdk import AssetWatcher

    from streamfill.orchestration.announcer_trigger import CommitAnnouncer

    return AssetWatcher(name=WATCHER, trigger=CommitAnnouncer(uri, announce_every))

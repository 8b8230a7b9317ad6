"""The Airflow Assets of a pipeline entry: its stream's table and its windows' table, named by the PostgreSQL
URI Airflow's postgres provider uses (`postgres://host:port/database/schema/table`, streamfill/datasets.py), so
a DAG that declares the same table by that URI schedules on the same asset.

The database is the one the connection `streamfill_postgres` names: it is read while the DAG file is parsed."""

from __future__ import annotations

from dataclasses import dataclass

from airflow.sdk import Asset

from orchestration import dag_ids
from orchestration.connections import POSTGRES_CONNECTION, postgres_url
from spark_jobs.pipelines import PipelineSpec
from streamfill.datasets import PgTable
from streamfill.errors import OptionError


@dataclass(frozen=True)
class EntryAssets:
    stream: Asset  # the stream's table: an event per announcement of its commits, keyed commits:<n>
    windows: Asset | None  # the interval DAG's table: an event per window run; None without a single topic


def database_url() -> str:
    """The URL of `streamfill_postgres` (Airflow's connection, from its secrets backend or environment)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return postgres_url(BaseHook.get_connection(POSTGRES_CONNECTION))
    except AirflowNotFoundException:
        raise OptionError(f"connection {POSTGRES_CONNECTION}", None, "is not defined, and the DAGs name their "
                          "tables' assets by its database", "define it (Admin > Connections, or AIRFLOW_CONN_"
                          f"{POSTGRES_CONNECTION.upper()}); docs/infrastructure.md lists it") from None


def table_asset(db_url: str, table: str) -> Asset:
    uri = PgTable.of(db_url, table).asset_uri
    return Asset(name=uri, uri=uri)


def of_entry(spec: PipelineSpec, db_url: str) -> EntryAssets:
    """The stream's table carries the watcher that announces the stream's commits (orchestration/announce.py)."""
    from airflow.sdk import AssetWatcher

    from orchestration.announcer_trigger import CommitAnnouncer

    uri = PgTable.of(db_url, spec.table).asset_uri
    watcher = AssetWatcher(name=dag_ids.announce(spec.name),
                           trigger=CommitAnnouncer(spec.name, uri, spec.announce_every_s))
    return EntryAssets(Asset(name=uri, uri=uri, watchers=[watcher]),
                       table_asset(db_url, spec.interval_target) if spec.topic is not None else None)

"""A hook over offsets_db for a team's own task: where a job stands, its lag, its dead letters and its history,
read through an Airflow connection of type postgres (the one the jobs write through, `streamfill_postgres` by
default, or a reader's). Read-only; every call is one short query.

    from streamfill.orchestration.offsets_hook import StreamfillOffsetsHook

    hook = StreamfillOffsetsHook(postgres_conn_id="streamfill_postgres")
    hook.position("orders")  # {TopicPartition("orders", 0): 1200, ...}: the next offset to read per partition
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from streamfill.offsets_db import queries
from streamfill.orchestration.connections import POSTGRES_CONNECTION, postgres_url
from streamfill.partitions import TopicPartition


class StreamfillOffsetsHook(BaseHook):
    """offsets_db through the Airflow connection `postgres_conn_id`."""

    conn_name_attr = "postgres_conn_id"
    default_conn_name = POSTGRES_CONNECTION
    conn_type = "postgres"
    hook_name = "offsets_db (streamfill)"

    def __init__(self, postgres_conn_id: str = POSTGRES_CONNECTION, url: str | None = None) -> None:
        """`url`: a SQLAlchemy URL read already (the committed-through trigger reads its connection itself)."""
        super().__init__()
        self.postgres_conn_id, self._url = postgres_conn_id, url

    @cached_property
    def engine(self):
        from streamfill.offsets_db.engine import make_engine

        return make_engine(self._url or postgres_url(self.get_connection(self.postgres_conn_id)), pool_size=1)

    def get_conn(self):
        """The SQLAlchemy engine on offsets_db."""
        return self.engine

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()

    def position(self, job: str) -> dict[TopicPartition, int]:
        """The next offset the job reads, per partition it has committed (latest_offsets); empty before its first
        commit, or for a job offsets_db does not have."""
        return {TopicPartition(t, p): o for t, p, o in queries.positions(self.engine, job)}

    def lag(self, job: str) -> dict[TopicPartition, int]:
        """Per partition, how far the job stood behind the broker's log end when it last planned (consumer_lag)."""
        return {TopicPartition(t, p): lag for t, p, lag in queries.lag_per_partition(self.engine, job)}

    def last_commit(self, job: str) -> datetime | None:
        """When the job last committed a batch; None before its first."""
        return queries.last_commit_and_worst_lag(self.engine, job)[0]

    def dead_letter_count(self, job: str) -> int:
        return queries.dead_letter_count(self.engine, job)

    def dead_letters(self, job: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest dead letters, newest first: topic, partition, offset, error, raw_value, created_at."""
        return queries.newest_dead_letters(self.engine, job, limit)

    def history(self, job: str, since: datetime | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """The job's batches per partition, newest first (offset_history: batch_seq, topic, partition,
        start_offset, end_offset, offsets, log_start, log_end, planned_at, committed_at); UnknownJob for a job
        offsets_db does not have."""
        return queries.rows(self.engine, "history", job, since=since, limit=limit)

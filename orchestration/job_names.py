"""The job name a replay runs under, from the form's fields (a window's is streamfill.names.window_job)."""

from __future__ import annotations


def replay_job(job: str, from_: str, to: str, table: str) -> str:
    """The same replay asked twice is the same job: append-new then changes nothing, replace rewrites."""
    from streamfill.spark_jobs.backfill_args import backfill_job

    return backfill_job(job, from_, to, table, kind="replay")

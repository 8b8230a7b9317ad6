"""A stream's health: the age of its newest commit and its worst partition's lag against the thresholds of its
entry's `health:`, unless the broker says it stands at the log end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from streamfill import dag_ids
from streamfill.offsets_db import queries, revision
from streamfill.offsets_db.engine import make_engine
from streamfill.partitions import TopicPartition


@dataclass(frozen=True)
class StreamHealth:
    """What a health check found: the job's newest commit, its worst partition's lag, and the thresholds missed."""

    last_commit: datetime | None
    max_lag: int | None
    problems: list[str]
    caught_up: bool = False  # the job's position is the log end in every partition (a quiet topic)


def health(db_url: str, job: str, max_commit_age: timedelta, max_lag: int, kafka: Mapping[str, str] | None = None,
           now: datetime | None = None) -> StreamHealth:
    """A stream is unhealthy when its newest commit is too old or a partition lags too far (consumer_lag), unless
    the broker (`kafka`) says it stands at the log end of every partition: a quiet topic has nothing to commit."""
    now = now or datetime.now(timezone.utc)
    engine = make_engine(db_url)
    try:
        revision.require(engine)
        last, lag = queries.last_commit_and_worst_lag(engine, job)
        positions = {TopicPartition(t, p): o for t, p, o in queries.positions(engine, job)}
    finally:
        engine.dispose()
    stale = commit_too_old(last, max_commit_age, now)
    caught_up = bool(stale and kafka is not None and positions and at_log_end(kafka, positions))
    return StreamHealth(last, lag, health_problems(job, last, lag, max_commit_age, max_lag, now, caught_up), caught_up)


def at_log_end(kafka: Mapping[str, str], positions: Mapping[TopicPartition, int]) -> bool:
    """Whether every partition's next offset is the broker's log end now (the last stable offset, as the
    source reads)."""
    from streamfill.connectors.kafka.broker import Broker

    ends = Broker(kafka, timeout_s=10).watermarks(sorted(positions))
    return all(offset >= ends[tp][1] for tp, offset in positions.items())


def commit_too_old(last: datetime | None, max_commit_age: timedelta, now: datetime) -> bool:
    """Whether the job never committed or its newest commit is older than the entry's threshold."""
    return last is None or now - last > max_commit_age


def lags_too_far(lag: int | None, max_lag: int) -> bool:
    """Whether the job's worst partition lags beyond the entry's threshold."""
    return lag is not None and lag > max_lag


def health_problems(job: str, last: datetime | None, lag: int | None, max_commit_age: timedelta, max_lag: int,
                    now: datetime, caught_up: bool = False) -> list[str]:
    """The thresholds of the entry's `health:` against the job's last commit and worst partition's lag; the
    health DAG fails on them and the streamfill page marks them red. A job `caught_up` at the log end is
    healthy whatever the age of its newest commit."""
    problems = []
    if caught_up:
        return problems
    if last is None:
        problems.append(f"job {job!r} has never committed a batch; is {dag_ids.stream(job)} running?")
    elif now - last > max_commit_age:
        problems.append(f"job {job!r} last committed at {last:%Y-%m-%d %H:%M:%S} UTC, {now - last} ago "
                        f"(threshold {max_commit_age}) and has records left to read; check "
                        f"{dag_ids.stream(job)}'s log")
    if lags_too_far(lag, max_lag):
        problems.append(f"job {job!r} lags {lag:,} offsets on its worst partition (threshold {max_lag:,}); "
                        "see `streamfill offsets lag --job " + job + "`")
    return problems

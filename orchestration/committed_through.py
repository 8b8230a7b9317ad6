"""What "a job's commits cover a point" means, for the committed-through sensor and its trigger. A point is one of:
- offsets: `{topic: {partition: offset}}`, each offset committed (the job's next offset there is past it);
- a time: every record of the job's topics with a timestamp before it committed: per partition, the job's next
  offset reaches the first offset at or after the time (offsets-for-times), or the log end where there is none;
  a time still ahead is not covered;
- another job's position: the job's next offset reaches the other job's in each of the other's partitions.
Offsets come from offsets_db's latest_offsets (what is committed to the sink, never a checkpoint's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from streamfill.errors import OptionError
from streamfill.names import validate_job_name
from streamfill.partitions import TopicPartition

POINTS = ("offsets", "time", "other_job")  # the sensor's and the trigger's ways of naming a point


@dataclass(frozen=True)
class Through:
    """A job and the point its commits must cover: exactly one of `offsets`, `time` and `other_job`."""

    job: str
    offsets: Mapping[TopicPartition, int] | None = None
    time: datetime | None = None
    other_job: str | None = None

    @classmethod
    def of(cls, job: str, offsets: Any = None, time: Any = None, other_job: str | None = None) -> Through:
        """From the sensor's rendered parameters: offsets as a mapping or its JSON, a time as a datetime or an
        ISO-8601 text (a naive one is UTC)."""
        validate_job_name(str(job), "job")
        given = [name for name, value in zip(POINTS, (offsets, time, other_job), strict=True)
                 if value not in (None, "")]
        if len(given) != 1:
            raise OptionError("offsets, time, other_job", given or None, "name the point the commits must cover "
                              "once: exactly one of the three", "give offsets={topic: {partition: offset}}, "
                              "time=<ISO-8601> or other_job=<job>")
        if other_job:
            return cls(str(job), other_job=validate_job_name(str(other_job), "other_job"))
        if time not in (None, ""):
            return cls(str(job), time=_time(time))
        return cls(str(job), offsets=_offsets(offsets))

    def kwargs(self) -> dict[str, Any]:
        """The point as JSON values (a trigger's serialized arguments)."""
        return {"job": self.job, "offsets": as_json(self.offsets) if self.offsets is not None else None,
                "time": self.time.isoformat() if self.time else None, "other_job": self.other_job}

    def describe(self) -> str:
        if self.other_job:
            return f"job {self.other_job!r}'s position"
        if self.time:
            return f"every record before {self.time.isoformat()}"
        return "offsets " + ", ".join(f"{tp.topic}-{tp.partition}@{o}" for tp, o in sorted(self.offsets.items()))


@dataclass(frozen=True)
class Coverage:
    """What a look found: covered, and else what is left (one line per partition short of its point)."""

    covered: bool
    left: list[str]
    position: Mapping[TopicPartition, int]


def as_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """`{topic: {partition: offset}}` with text keys, as JSON and XCom take it."""
    out: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(positions.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offset)
    return out


def covered_by(position: Mapping[TopicPartition, int], needed: Mapping[TopicPartition, int]) -> list[str]:
    """The partitions whose next offset in `position` has not reached `needed`'s, described."""
    return [f"{tp.topic}-{tp.partition}: next offset {position[tp] if tp in position else 'none yet'}, needs "
            f"{n}" for tp, n in sorted(needed.items()) if position.get(tp, 0) < n]


def coverage(hook, through: Through, kafka: Mapping[str, str] | None = None,
             now: datetime | None = None) -> Coverage:
    """Whether `through.job`'s commits cover its point now; `hook` reads offsets_db (StreamfillOffsetsHook),
    `kafka` (the cluster's client settings) is needed for a time."""
    position = hook.position(through.job)
    if through.offsets is not None:
        needed = {tp: o + 1 for tp, o in through.offsets.items()}  # offset o is committed once the next is past it
    elif through.other_job is not None:
        needed = hook.position(through.other_job)
        if not needed:
            return Coverage(False, [f"job {through.other_job!r} has committed nothing yet"], position)
    else:
        now = now or datetime.now(timezone.utc)
        if through.time > now:
            return Coverage(False, [f"{through.time.isoformat()} is still ahead"], position)
        if not position:
            return Coverage(False, [f"job {through.job!r} has committed nothing yet"], position)
        if kafka is None:
            raise OptionError("kafka_conn_id", None, "is needed to find the offsets of a time", "name the Kafka "
                              "connection of the job's cluster")
        needed = offsets_at(kafka, sorted({tp.topic for tp in position}), through.time)
    left = covered_by(position, needed)
    return Coverage(not left, left, position)


def offsets_at(kafka: Mapping[str, str], topics: list[str], time: datetime) -> dict[TopicPartition, int]:
    """Per partition of `topics`, the first offset whose timestamp is at or after `time`, else the log end."""
    from streamfill.connectors.kafka.broker import Broker

    broker = Broker(kafka, timeout_s=10)
    counts = broker.topics()
    partitions = [TopicPartition(t, p) for t in topics for p in range(counts.get(t, 0))]
    ms = int(time.timestamp() * 1000)
    found = broker.offsets_for_times({tp: ms for tp in partitions})
    ends = broker.watermarks([tp for tp in partitions if found.get(tp) is None])
    return {tp: found[tp] if found.get(tp) is not None else ends[tp][1] for tp in partitions}


def _time(raw: Any) -> datetime:
    if isinstance(raw, datetime):
        when = raw
    else:
        try:
            when = datetime.fromisoformat(str(raw))
        except ValueError:
            raise OptionError("time", raw, "is not an ISO-8601 time", "e.g. 2026-11-20T10:00:00+00:00 or "
                              "{{ data_interval_end }}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _offsets(raw: Any) -> dict[TopicPartition, int]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    try:
        found = {TopicPartition(str(topic), int(p)): int(o) for topic, parts in raw.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        found = {}
    if not found:
        raise OptionError("offsets", raw, "is not a mapping of topic to partition to offset",
                          'e.g. {"orders": {"0": 1200, "1": 980}}')
    return found

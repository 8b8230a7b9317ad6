"""Offset specs (earliest, latest, per-partition JSON, timestamps): the one parser, used by the source's
options and the backfill's --from/--to alike, and their resolution to positions.

Resolution is pure: it takes the broker's watermarks and an offsets-for-times lookup as arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from streamfill.connectors.kafka.source_declarations import STARTING_GROUP, STARTING_OFFSETS, STARTING_TIMESTAMP
from streamfill.errors import OptionError
from streamfill.partitions import Positions, TopicPartition

EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class Earliest:
    pass


@dataclass(frozen=True)
class Latest:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; -2 means earliest and -1 latest, as in Spark."""

    offsets: tuple[tuple[TopicPartition, int], ...]


@dataclass(frozen=True)
class GlobalTimestamp:
    """Every partition at the first offset whose timestamp is >= timestamp_ms."""

    timestamp_ms: int


@dataclass(frozen=True)
class TimestampByPartition:
    timestamps: tuple[tuple[TopicPartition, int], ...]


@dataclass(frozen=True)
class GroupOffsets:
    """A consumer group's committed offsets, each the next record to read: where a Kafka Connect sink stopped.
    A stream's start only (`startingGroup`), resolved by the enumerator, which asks the broker."""

    group: str


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | TimestampByPartition | GroupOffsets

SPEC_HELP = ("earliest, latest, per-partition offsets as JSON ('{\"0\": 100, \"1\": 250}') or an ISO-8601 time "
             "('2026-11-22T10:00:00Z')")


def parse_spec(raw: str, option: str, *, side: str, bounded: bool, topic: str | None = None,
               times: bool = False) -> OffsetSpec:
    """`earliest`, `latest` or per-partition JSON in Spark's shape (`{"t": {"0": 42}}`, -2 earliest, -1 latest).

    With `topic`, the short form `{"0": 42}` of that topic too; with `times`, an ISO-8601 instant (UTC when it
    has no offset). `side` is "starting" or "ending"; a bounded read cannot start at latest, and no read ends at
    earliest-by-number (-2).
    """
    text = raw.strip()
    if text.lower() == "earliest":
        if side == "ending" and not times:
            raise OptionError(option, raw, "earliest is not a valid end", "Use latest or per-partition offsets")
        return Earliest()
    if text.lower() == "latest":
        if side == "starting" and bounded and not times:
            raise OptionError(option, raw, "a bounded read cannot start at latest (it would read nothing)",
                              "Use earliest, per-partition offsets or a timestamp")
        return Latest()
    if times and not text.startswith("{"):
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise OptionError(option, raw, "is not a spec", f"use {SPEC_HELP}") from None
        return GlobalTimestamp(int((when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp() * 1000))
    pairs = per_partition(text, option, topic=topic)
    ending = side == "ending" and not times
    allowed = "-1 (latest) or an offset >= 0" if ending else "-2 (earliest), -1 (latest) or >= 0"
    for tp, off in pairs:
        if not json_int(off):
            raise OptionError(option, raw, f"offset {shown(off)} of {tp} is not a JSON integer",
                              f"The JSON must map partition numbers to offsets: {allowed}")
        if off < EARLIEST or (ending and off == EARLIEST):
            raise OptionError(option, raw, f"offset {off} of {tp} is not valid",
                              f"The JSON must map partition numbers to offsets: {allowed}")
    if bounded and side == "starting" and not times and any(off == LATEST for _, off in pairs):
        raise OptionError(option, raw, "a bounded read cannot start at -1 (latest)", "Use -2 or an offset")
    return SpecificOffsets(tuple(pairs))


GROUP_START = "group:"  # a start at a consumer group's committed offsets: `group:connect-NAME`
CONNECT_GROUP_PREFIX = "connect-"  # Kafka Connect names a sink connector's group connect-<connector name>
START_HELP = ("earliest, latest, an ISO-8601 time ('2026-11-22T10:00:00Z') or group:NAME (the committed offsets of "
              "consumer group NAME, e.g. a Kafka Connect sink's group:connect-my-sink)")

StreamStart = Earliest | Latest | GlobalTimestamp | GroupOffsets


def parse_start(raw: str, option: str) -> StreamStart:
    """Where a stream starts when offsets_db has no position for its job (an entry's `start:`, `--start`)."""
    if raw.strip().lower().startswith(GROUP_START):
        group = raw.strip()[len(GROUP_START):].strip()
        if not group:
            raise OptionError(option, raw, "names no consumer group", "write group:NAME, e.g. group:connect-my-sink")
        return GroupOffsets(group)
    if raw.strip().startswith("{"):
        raise OptionError(option, raw, "is not a start of a whole stream", f"use {START_HELP}")
    try:
        spec = parse_spec(raw, option, side="starting", bounded=False, times=True)
    except OptionError:
        raise OptionError(option, raw, "is not a start", f"use {START_HELP}") from None
    if isinstance(spec, GlobalTimestamp) and spec.timestamp_ms > datetime.now(timezone.utc).timestamp() * 1000:
        raise OptionError(option, raw, "is in the future", "use a past time, latest or earliest")
    return spec


def start_option(spec: StreamStart) -> tuple[str, str]:
    """The source option (name, value) that starts a read at `spec`."""
    if isinstance(spec, GroupOffsets):
        return STARTING_GROUP.key, spec.group
    if isinstance(spec, GlobalTimestamp):
        return STARTING_TIMESTAMP.key, str(spec.timestamp_ms)
    return STARTING_OFFSETS.key, "earliest" if isinstance(spec, Earliest) else "latest"


def json_int(value: object) -> bool:
    """A JSON integer: not `true` (Python's bool is an int subclass, so it would pass as 1), not 1.0 or 1e3."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value: object) -> str:
    """A parsed JSON value as the user wrote it (`true`, not Python's `True`)."""
    return json.dumps(value)


def per_partition(raw: str, option: str, *, topic: str | None = None) -> list[tuple[TopicPartition, object]]:
    """`{"topic": {"partition": value}}`; with `topic`, `{"partition": value}` of that topic as well."""
    example = '{"0": 42, "1": -2}' if topic else '{"orders": {"0": 42, "1": -2}}'
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(option, raw, f"is not valid JSON ({exc.msg} at column {exc.colno})",
                          f"Fix the JSON, e.g. {example}") from None
    if topic is not None and isinstance(parsed, dict) and not (set(parsed) == {topic}
                                                               and isinstance(parsed[topic], dict)):
        parsed = {topic: parsed}  # the short form of one topic
    if not isinstance(parsed, dict) or not parsed or not all(isinstance(v, dict) for v in parsed.values()):
        raise OptionError(option, raw, "must map each topic to {partition: value}",
                          f"The JSON must map partition numbers to offsets, e.g. {example}")
    out = []
    for name, parts in parsed.items():
        for p, v in parts.items():
            if not (p.isascii() and p.isdigit()):  # JSON keys are strings; '²'.isdigit() is true
                raise OptionError(option, raw, f"partition {p!r} of {name} is not a number",
                                  f"The JSON must map partition numbers to offsets, e.g. {example}")
            out.append((TopicPartition(name, int(p)), v))
    return out


Watermarks = Mapping[TopicPartition, tuple[int, int]]
"""(log-start, log-end) per partition; log-end is the last stable offset under read_committed."""

OffsetsForTimes = Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, int | None]]
"""Timestamp per partition -> first offset at or after it, None when no record is that recent."""


def resolve(spec: OffsetSpec, partitions: list[TopicPartition], watermarks: Watermarks,
            offsets_for_times: OffsetsForTimes, *, option: str, default: OffsetSpec,
            strict: bool = False) -> Positions:
    """Concrete offsets for partitions.

    Partitions that a per-partition spec leaves out take `default` (earliest for a start, latest for an end),
    unlike Spark, which fails the query; `strict=True` restores Spark's failure.
    """
    if isinstance(spec, GroupOffsets):  # a programming error: group_start turns it into offsets first
        raise TypeError("a group's committed offsets come from the broker: resolve group_start.offsets_of's result")
    if isinstance(spec, Earliest):
        return {tp: watermarks[tp][0] for tp in partitions}
    if isinstance(spec, Latest):
        return {tp: watermarks[tp][1] for tp in partitions}
    if isinstance(spec, GlobalTimestamp):
        return _by_time({tp: spec.timestamp_ms for tp in partitions}, watermarks, offsets_for_times)
    given = dict(spec.offsets if isinstance(spec, SpecificOffsets) else spec.timestamps)
    unknown = sorted(set(given) - set(partitions))
    if unknown:
        raise OptionError(option, str(unknown[0]), f"partition {unknown[0]} is not among the partitions read "
                          f"({len(partitions)} partitions)", "Name only partitions of the subscribed topics")
    missing = [tp for tp in partitions if tp not in given]
    if missing and strict:
        raise OptionError(option, str(missing[0]), f"partition {missing[0]} has no offset and strictOffsets=true",
                          "Give every partition an offset, or drop strictOffsets to use the default")
    out = resolve(default, missing, watermarks, offsets_for_times, option=option, default=default) if missing else {}
    if isinstance(spec, SpecificOffsets):
        for tp, off in given.items():
            low, high = watermarks[tp]
            out[tp] = low if off == EARLIEST else high if off == LATEST else off
    else:
        out.update(_by_time(given, watermarks, offsets_for_times))
    return out


def _by_time(times: dict[TopicPartition, int], watermarks: Watermarks,
             offsets_for_times: OffsetsForTimes) -> Positions:
    """First offset at or after each timestamp; past the newest record, the log end (an empty range)."""
    found = offsets_for_times(times)
    return {tp: (found.get(tp) if found.get(tp) is not None else watermarks[tp][1]) for tp in times}

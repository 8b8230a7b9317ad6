"""Offset specs (earliest, latest, per-partition JSON, timestamps) and their resolution to positions.

Resolution is pure: it takes the broker's watermarks and an offsets-for-times lookup as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from connectors.kafka.errors import OptionError
from connectors.kafka.partitions import Positions, TopicPartition

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


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | TimestampByPartition

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

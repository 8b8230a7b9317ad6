"""The pure half of a backfill: resolve `--from`/`--to` to per-partition ranges with every check done before
Spark starts, and cut the remaining work into chunks. Specs are parsed by the connector's one offset-spec
parser and checked by its one range check."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import accumulate

from streamfill.connectors.kafka import offsets, planner
from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetsForTimes,
    OffsetSpec,
    SpecificOffsets,
    Watermarks,
    resolve,
)
from streamfill.errors import OptionError
from streamfill.partitions import Positions, TopicPartition

# offsets per chunk when no --chunk-size is given (the CLI, spark-submit and the replay form): each chunk is one
# Spark job and one commit, so larger chunks spread that cost over more records
DEFAULT_CHUNK = 500_000


def parse_spec(raw: str, flag: str, topic: str) -> OffsetSpec:
    """`--from`/`--to`: earliest, latest, per-partition JSON of `topic` (short or Spark's shape) or an ISO time."""
    return offsets.parse_spec(raw, flag, side="ending" if flag == "--to" else "starting", bounded=True,
                              topic=topic, times=True)


@dataclass(frozen=True)
class Window:
    """The resolved plan: [start, end) per partition, fixed before reading."""

    bounds: dict[TopicPartition, tuple[int, int]]

    @property
    def total(self) -> int:
        return sum(e - s for s, e in self.bounds.values())

    def to_json(self) -> dict[str, list[int]]:
        return {f"{tp.topic}:{tp.partition}": [s, e] for tp, (s, e) in sorted(self.bounds.items())}

    @classmethod
    def from_json(cls, raw: Mapping[str, list[int]]) -> Window:
        out = {}
        for key, (s, e) in raw.items():
            topic, _, part = key.rpartition(":")
            out[TopicPartition(topic, int(part))] = (s, e)
        return cls(out)


def resolve_window(topic: str, partitions: int | None, watermarks: Watermarks, offsets_for_times: OffsetsForTimes,
                   from_: OffsetSpec, to: OffsetSpec, now_ms: int, *, raw_from: str, raw_to: str,
                   known_topics: list[str] = ()) -> Window:
    """Concrete ranges, or an OptionError naming the flag, the value and the fix (the data-loss rules of
    docs/guarantees.md included: a backfill refuses offsets that retention already deleted)."""
    if partitions is None:
        close = [t for t in known_topics if not t.startswith("_")][:10]
        raise OptionError("--topic", topic, "does not exist",
                          f"existing topics: {', '.join(close) or 'none'}. Check the name or produce to it first")
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    for flag, raw, spec in (("--from", raw_from, from_), ("--to", raw_to, to)):
        if isinstance(spec, GlobalTimestamp) and spec.timestamp_ms > now_ms:
            now = datetime.fromtimestamp(now_ms / 1000, timezone.utc).isoformat(timespec="seconds")
            raise OptionError(flag, raw, f"is in the future (now is {now})", "use a past time, or latest")
        if isinstance(spec, SpecificOffsets):
            for tp, _ in spec.offsets:
                if tp.partition >= partitions:
                    raise OptionError(flag, raw, f"names partition {tp.partition}, but topic {topic!r} has "
                                      f"partitions 0..{partitions - 1}", "name only those")
    if isinstance(from_, GlobalTimestamp) and isinstance(to, GlobalTimestamp) and from_.timestamp_ms > to.timestamp_ms:
        raise OptionError("--from", raw_from, f"is after --to {raw_to!r}", "swap them")
    start = resolve(from_, parts, watermarks, offsets_for_times, option="--from", default=Earliest())
    end = resolve(to, parts, watermarks, offsets_for_times, option="--to", default=Latest())
    planner.check_within_log(start, watermarks, option="--from", value=raw_from, below_start_is_error=True)
    planner.check_within_log(end, watermarks, option="--to", value=raw_to, below_start_is_error=True)
    for tp in parts:
        if start[tp] > end[tp]:
            raise OptionError("--from", raw_from, f"is after --to {raw_to!r} on {tp}: start offset {start[tp]} > "
                              f"end offset {end[tp]}", "choose a --to at or after --from")
    return Window({tp: (start[tp], end[tp]) for tp in parts})


def progress(window: Window, snapshot: Mapping[TopicPartition, int]) -> Positions:
    """Where each partition of the window stands, from the job's committed snapshot."""
    return {tp: min(max(snapshot.get(tp, s), s), e) for tp, (s, e) in window.bounds.items()}


def remaining(window: Window, done: Positions) -> int:
    return sum(e - done[tp] for tp, (_, e) in window.bounds.items())


def next_chunk(window: Window, done: Positions, chunk_size: int, width: int | None = None,
               busy: Collection[TopicPartition] = ()) -> dict[TopicPartition, tuple[int, int]]:
    """The next chunk: at most chunk_size offsets, shared across partitions in proportion to what is left
    (the planner's admission control), only partitions with work left and not `busy` (read by a chunk still
    being written: chunks in flight never share a partition, so they may commit in any order).

    With `width` (the tasks the cluster runs at once), a chunk reads only the `width` partitions with the most
    left (more when those hold less than a chunk): each partition is one task and one part table with a fixed
    cost, so a small chunk is one wave of larger tasks rather than a small task per partition."""
    ends = {tp: e for tp, (_, e) in window.bounds.items() if e > done[tp] and tp not in busy}
    if width and len(ends) > width:
        by_left = sorted(ends, key=lambda tp: (done[tp] - ends[tp], tp))
        held = accumulate(ends[tp] - done[tp] for tp in by_left)  # what the first 1, 2, ... partitions hold
        full = next((n for n, total in enumerate(held, 1) if total >= chunk_size), len(by_left))
        ends = {tp: ends[tp] for tp in by_left[:max(width, full)]}
    ends = planner.rate_limit({tp: done[tp] for tp in ends}, ends, chunk_size)
    return {tp: (done[tp], ends[tp]) for tp in sorted(ends) if ends[tp] > done[tp]}

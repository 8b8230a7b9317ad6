"""The pure half of a backfill: parse `--from`/`--to`, resolve them to per-partition ranges with every check
done before Spark starts, and cut the remaining work into chunks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from connectors.kafka import planner
from connectors.kafka.errors import OptionError
from connectors.kafka.offsets import (
    Earliest, GlobalTimestamp, Latest, OffsetSpec, OffsetsForTimes, SpecificOffsets, Watermarks, resolve,
)
from connectors.kafka.partitions import Positions, TopicPartition

SPEC_HELP = ("earliest, latest, per-partition offsets as JSON ('{\"0\": 100, \"1\": 250}') or an ISO-8601 time "
             "('2026-11-22T10:00:00Z')")


class BackfillError(ValueError):
    """Bad backfill input, named with its value and the fix; raised before any Spark work."""


def parse_spec(raw: str, flag: str, topic: str) -> OffsetSpec:
    text = raw.strip()
    if text.lower() == "earliest":
        return Earliest()
    if text.lower() == "latest":
        return Latest()
    if text.startswith("{"):
        return _offsets(text, flag, topic)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise BackfillError(f"{flag} {raw!r} is not a spec; use {SPEC_HELP}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return GlobalTimestamp(int(when.timestamp() * 1000))


def _offsets(text: str, flag: str, topic: str) -> SpecificOffsets:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackfillError(f"{flag} {text!r} is not valid JSON ({exc.msg}); write it as "
                            '\'{"0": 100, "1": 250}\'') from None
    if isinstance(parsed, dict) and set(parsed) == {topic} and isinstance(parsed[topic], dict):
        parsed = parsed[topic]  # Spark's shape, {"topic": {"0": 100}}
    out = []
    for part, off in (parsed.items() if isinstance(parsed, dict) else [(None, None)]):
        if part is None or not str(part).isdigit() or not isinstance(off, int) or isinstance(off, bool) or off < -2:
            raise BackfillError(f"{flag} {text!r} must map partition numbers to offsets (-2 earliest, -1 latest), "
                                f'e.g. \'{{"0": 100, "1": 250}}\'')
        out.append((TopicPartition(topic, int(part)), off))
    return SpecificOffsets(tuple(out))


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
                   frm: OffsetSpec, to: OffsetSpec, now_ms: int, *, raw_from: str, raw_to: str,
                   known_topics: list[str] = ()) -> Window:
    """Concrete ranges, or a BackfillError naming the value and the fix (design §2's data-loss rules included)."""
    if partitions is None:
        close = [t for t in known_topics if not t.startswith("_")][:10]
        raise BackfillError(f"--topic {topic!r} does not exist; existing topics: {', '.join(close) or 'none'}. "
                            "Check the name or produce to it first")
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    for flag, raw, spec in (("--from", raw_from, frm), ("--to", raw_to, to)):
        if isinstance(spec, GlobalTimestamp) and spec.timestamp_ms > now_ms:
            now = datetime.fromtimestamp(now_ms / 1000, timezone.utc).isoformat(timespec="seconds")
            raise BackfillError(f"{flag} {raw!r} is in the future (now is {now}); use a past time, or latest")
        if isinstance(spec, SpecificOffsets):
            for tp, _ in spec.offsets:
                if tp.partition >= partitions:
                    raise BackfillError(f"{flag} {raw!r} names partition {tp.partition}, but topic {topic!r} has "
                                        f"partitions 0..{partitions - 1}; name only those")
    if isinstance(frm, GlobalTimestamp) and isinstance(to, GlobalTimestamp) and frm.timestamp_ms > to.timestamp_ms:
        raise BackfillError(f"--from {raw_from!r} is after --to {raw_to!r}; swap them")
    try:
        start = resolve(frm, parts, watermarks, offsets_for_times, option="--from", default=Earliest())
        end = resolve(to, parts, watermarks, offsets_for_times, option="--to", default=Latest())
    except OptionError as exc:
        raise BackfillError(str(exc)) from None
    for tp in parts:
        low, high = watermarks[tp]
        for flag, raw, off in (("--from", raw_from, start[tp]), ("--to", raw_to, end[tp])):
            if off < low:
                raise BackfillError(
                    f"{flag} {raw!r}: offset {off} of {tp} is below the log start {low}; offsets {off}..{low - 1} "
                    f"were deleted by retention or delete_records and cannot be read. Start at {low} or later "
                    "(or use earliest)")
            if off > high:
                raise BackfillError(f"{flag} {raw!r}: offset {off} of {tp} is beyond the log end {high}; "
                                    f"use at most {high} (or latest)")
        if start[tp] > end[tp]:
            raise BackfillError(f"--from {raw_from!r} is after --to {raw_to!r} on {tp}: start offset {start[tp]} > "
                                f"end offset {end[tp]}; choose a --to at or after --from")
    return Window({tp: (start[tp], end[tp]) for tp in parts})


def progress(window: Window, snapshot: Mapping[TopicPartition, int]) -> Positions:
    """Where each partition of the window stands, from the job's committed snapshot."""
    return {tp: min(max(snapshot.get(tp, s), s), e) for tp, (s, e) in window.bounds.items()}


def remaining(window: Window, done: Positions) -> int:
    return sum(e - done[tp] for tp, (_, e) in window.bounds.items())


def next_chunk(window: Window, done: Positions, chunk_size: int) -> dict[TopicPartition, tuple[int, int]]:
    """The next chunk: at most chunk_size offsets, shared across partitions in proportion to what is left
    (the planner's admission control), only partitions with work left."""
    ends = planner.rate_limit(done, {tp: e for tp, (_, e) in window.bounds.items()}, chunk_size)
    return {tp: (done[tp], ends[tp]) for tp in sorted(ends) if ends[tp] > done[tp]}

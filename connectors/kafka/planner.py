"""What to read: offset ranges, splitting and admission control (Spark's KafkaOffsetRangeCalculator and
rateLimit). Pure functions over positions and watermarks; `spark.read` and `spark.readStream` share them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

from streamfill.connectors.kafka.offsets import Watermarks
from streamfill.connectors.kafka.source_declarations import ENDING_OFFSETS
from streamfill.errors import OptionError
from streamfill.partitions import Positions, TopicPartition


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Half-open [start, end) of one partition: the unit of work of one task, and what offsets_db records of a
    plan. `log_start` and `log_end` are the partition's watermarks when it was planned (None: not known); they are
    a record of that moment, not part of the range, so two ranges with the same bounds are equal."""

    topic: str
    partition: int
    start: int
    end: int
    log_start: int | None = field(default=None, compare=False)
    log_end: int | None = field(default=None, compare=False)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start

    def split(self, parts: int) -> list[OffsetRange]:
        """parts ordered, disjoint, covering pieces of nearly equal size (never an empty one)."""
        parts = max(1, min(parts, self.size))
        bounds = [self.start + self.size * i // parts for i in range(parts + 1)]
        return [OffsetRange(self.topic, self.partition, a, b) for a, b in pairwise(bounds)]


def ranges_between(start: Positions, end: Positions, *, option: str = ENDING_OFFSETS.key) -> list[OffsetRange]:
    """One range per partition from start to end; an end before its start is the user's error."""
    out = []
    for tp in sorted(end):
        begin = start.get(tp)
        if begin is None:
            continue
        if end[tp] < begin:
            raise OptionError(option, end[tp], f"the end of {tp} ({end[tp]}) is before its start ({begin})",
                              "Choose an end at or after the start")
        out.append(OffsetRange(tp.topic, tp.partition, begin, end[tp]))
    return out


def check_within_log(positions: Positions, watermarks: Watermarks, *, option: str, value: object = None,
                     below_start_is_error: bool = False) -> None:
    """The one range check. An offset past the log end can never be read: refuse it instead of waiting forever.
    One below the log start was deleted: a source leaves that to the data-loss rules (failOnDataLoss), a
    backfill refuses it (`below_start_is_error`)."""
    for tp, off in sorted(positions.items()):
        low, high = watermarks[tp]
        shown = off if value is None else value
        if off > high:
            raise OptionError(option, shown, f"ends beyond the log: offset {off} of {tp} is beyond the log end {high}",
                              f"use -1 (latest) or an offset at most {high}")
        if below_start_is_error and off < low:
            raise OptionError(option, shown, f"starts below the log: offset {off} of {tp} is below the log start {low}",
                              f"offsets {off}..{low - 1} were deleted by retention or delete_records and cannot be "
                              f"read. Start at {low} or later (or use earliest)")


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Cut large ranges so no task straggles.

    maxRecordsPerPartition caps every piece; then, while there are fewer pieces than minPartitions, ranges
    larger than an even share are cut in proportion to their size (Spark 4's KafkaOffsetRangeCalculator).
    """
    pieces = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        pieces = [p for r in pieces for p in r.split(math.ceil(r.size / max_records_per_partition))]
    if min_partitions and len(pieces) < min_partitions:
        total = sum(r.size for r in pieces)
        out = []
        for r in pieces:
            share = r.size * min_partitions / total
            out.extend(r.split(max(1, round(share))) if share >= 1 else [r])
        pieces = out
    return pieces


def pack_ranges(ranges: list[OffsetRange], max_tasks: int | None = None,
                max_records: int | None = None) -> list[tuple[OffsetRange, ...]]:
    """The ranges of a batch grouped into the tasks that read them: one range per task unless `max_tasks`
    (maxPartitions) is set; then at most that many tasks, each range going, largest first, to the task with the
    fewest records so far. A batch of small ranges costs a task's fixed start-up once per core instead of once
    per partition. No task grows past `max_records` (maxRecordsPerPartition), which may leave more tasks.
    """
    if not max_tasks or len(ranges) <= max_tasks:
        return [(r,) for r in ranges]
    tasks: list[list[OffsetRange]] = [[] for _ in range(max_tasks)]
    sizes = [0] * max_tasks
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        i = min(range(len(tasks)), key=lambda n: (sizes[n], n))
        if max_records and sizes[i] and sizes[i] + r.size > max_records:
            tasks.append([])
            sizes.append(0)
            i = len(tasks) - 1
        tasks[i].append(r)
        sizes[i] += r.size
    return [tuple(sorted(t, key=lambda r: (r.topic, r.partition, r.start))) for t in tasks if t]


def rate_limit(start: Positions, latest: Positions, limit: int) -> Positions:
    """Ends that admit at most `limit` offsets in all, shared in proportion to each partition's backlog.

    Largest-remainder rounding: the total is exactly min(limit, backlog), never more; small partitions get
    their share of the remainder before they starve.
    """
    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    quota = {tp: limit * size / total for tp, size in backlog.items()}
    take = {tp: math.floor(q) for tp, q in quota.items()}
    left = limit - sum(take.values())
    for tp in sorted(quota, key=lambda t: (take[t] - quota[t], t))[:left]:
        take[tp] += 1
    return {tp: start[tp] + min(take[tp], backlog[tp]) for tp in latest}


def cap(latest: Positions, target: Positions) -> Positions:
    """Never past `target` (Trigger.AvailableNow's end); partitions unknown to target stay where latest is."""
    return {tp: min(off, target[tp]) if tp in target else off for tp, off in latest.items()}


def backlog(start: Positions, latest: Positions) -> int:
    return sum(max(0, off - start.get(tp, off)) for tp, off in latest.items())


def offsets_behind(end: Positions, latest: Positions) -> dict[str, int]:
    """Spark's Kafka progress metrics: how far the batch end is from the newest offsets."""
    behind = [max(0, latest[tp] - end.get(tp, 0)) for tp in latest]
    if not behind:
        return {"minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 0, "avgOffsetsBehindLatest": 0}
    return {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
            "avgOffsetsBehindLatest": round(sum(behind) / len(behind), 1)}

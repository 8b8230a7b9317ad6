"""Discovers partitions and turns offset specs into ranges, for bounded reads and for each stream round
(Flink's split enumerator). The broker is asked through `Broker`; the decisions are the planner's."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from streamfill.connectors.kafka import data_loss, group_start, planner
from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.data_loss import DataLoss
from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    GroupOffsets,
    Latest,
    TimestampByPartition,
    Watermarks,
    resolve,
)
from streamfill.connectors.kafka.options import SourceOptions
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.kafka.source_declarations import STARTING_GROUP, SUBSCRIBE_PATTERN
from streamfill.connectors.kafka.subscription import SubscribePattern
from streamfill.errors import OptionError
from streamfill.partitions import Positions, TopicPartition


@dataclass(frozen=True)
class Plan:
    """The ranges one batch reads, the broker's watermarks when it was planned, and any loss found."""

    ranges: list[OffsetRange]
    watermarks: Watermarks
    losses: list[DataLoss] = field(default_factory=list)
    bounds: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # [begin, end) per partition


def _partitions(opts: SourceOptions, broker: Broker) -> list[TopicPartition]:
    """The subscription's partitions, each topic one this client's user may read (asked once per topic): a
    topic hidden by the authorizer is named as such, not as unknown."""
    parts = opts.subscription.partitions(broker.readable(opts.subscription.named()))
    broker.require(sorted({tp.topic for tp in parts}), "read")
    if not parts and isinstance(opts.subscription, SubscribePattern):
        raise OptionError(SUBSCRIBE_PATTERN.key, opts.subscription.pattern, "matches no topic",
                          "Create a matching topic first or fix the pattern")
    return parts


def plan_bounded(opts: SourceOptions, broker: Broker) -> Plan:
    """spark.read: resolve both ends once, on the driver."""
    parts = _partitions(opts, broker)
    wm = broker.watermarks(parts)
    start_name = _spec_name(opts, "starting")
    end_name = _spec_name(opts, "ending")
    start = resolve(opts.starting, parts, wm, broker.offsets_for_times, option=start_name, default=Earliest(),
                    strict=opts.strict_offsets)
    end = resolve(opts.ending or Latest(), parts, wm, broker.offsets_for_times, option=end_name,
                  default=Latest(), strict=opts.strict_offsets)
    planner.check_within_log(start, wm, option=start_name)
    planner.check_within_log(end, wm, option=end_name)
    planner.ranges_between(start, end, option=end_name)  # an end before its start is the user's error
    losses = data_loss.enforce(data_loss.below_log_start(start, wm), opts.fail_on_data_loss)
    start = data_loss.skip_lost(start, wm)
    end = {tp: max(off, start[tp]) for tp, off in end.items()}
    ranges = planner.ranges_between(start, end, option=end_name)
    return Plan(planner.split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition), wm, losses,
                {tp: (start[tp], end[tp]) for tp in end})


def _spec_name(opts: SourceOptions, side: str) -> str:
    """The option a user wrote for this end, so errors name it."""
    spec = opts.starting if side == "starting" else opts.ending
    if isinstance(spec, GlobalTimestamp):
        return f"{side}Timestamp"
    if isinstance(spec, TimestampByPartition):
        return f"{side}OffsetsByTimestamp"
    if isinstance(spec, GroupOffsets):
        return STARTING_GROUP.key
    return f"{side}Offsets"


class StreamEnumerator:
    """The planning half of a stream: where it starts, where each micro-batch ends, and what it reads."""

    def __init__(self, opts: SourceOptions, broker: Broker) -> None:
        self.opts = opts
        self.broker = broker
        self.target: Positions | None = None  # Trigger.AvailableNow's end
        self.latest_seen: Positions = {}
        self._last_trigger = time.monotonic()
        self._initial: Positions | None = None

    def initial(self, resume: Positions | None = None) -> Positions:
        """Resolved once: Spark asks twice in a fresh query, and `latest` must not move in between.

        `resume` (the job's snapshot in offsets_db) wins over the starting spec for the partitions it has;
        a resumed offset that aged out meanwhile is left for the data-loss rules of the first plan.
        """
        if self._initial is None:
            self._initial = self._resolve_initial(resume or {})
        return self._initial

    def _resolve_initial(self, resume: Positions) -> Positions:
        parts = _partitions(self.opts, self.broker)
        wm = self.broker.watermarks(parts)
        spec = self.opts.starting
        if isinstance(spec, GroupOffsets):
            # the group is read by a stream's first launch only: a job with a position took the group's offsets
            # then, and its partitions new since start at earliest, as partitions new to a running stream do
            spec = Earliest() if resume else group_start.offsets_of(spec.group, parts, self.broker)
        start = resolve(spec, parts, wm, self.broker.offsets_for_times,
                        option=_spec_name(self.opts, "starting"), default=Latest(), strict=self.opts.strict_offsets)
        start = {tp: off for tp, off in start.items() if tp not in resume}
        planner.check_within_log(start, wm, option=_spec_name(self.opts, "starting"))
        return {**start, **{tp: resume[tp] for tp in parts if tp in resume}}

    def latest(self) -> tuple[Positions, Watermarks]:
        """Partitions are listed again every round, so new ones (and new pattern matches) are picked up."""
        parts = _partitions(self.opts, self.broker)
        wm = self.broker.watermarks(parts)
        self.latest_seen = {tp: wm[tp][1] for tp in parts}
        return self.latest_seen, wm

    def prepare_available_now(self) -> None:
        self.target, _ = self.latest()

    def next_end(self, start: Positions, max_rows: int | None, min_rows: int | None) -> Positions:
        """Where the next micro-batch ends; `start` itself when there is nothing (or not enough) to read."""
        latest, wm = self.latest()
        full_start = {tp: start.get(tp, wm[tp][0]) for tp in latest}  # new partitions from their first offset
        went_back = data_loss.beyond_log_end(full_start, wm)  # a batch must report it, even with nothing to read
        full_start = data_loss.skip_lost(full_start, wm)
        if self.target is not None:  # never past AvailableNow's end; a partition it does not know reads nothing
            capped = planner.cap(latest, {**full_start, **self.target})
            latest = {tp: max(full_start[tp], off) for tp, off in capped.items()}
        end = planner.rate_limit(full_start, latest, max_rows) if max_rows else latest
        end = {tp: max(off, full_start[tp]) for tp, off in end.items()}
        available = planner.backlog(full_start, end)
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        if went_back:
            self._last_trigger = time.monotonic()
            return end
        if available == 0 or (min_rows and available < min_rows and waited_ms < self.opts.max_trigger_delay_ms
                              and self.target is None):
            return dict(start)
        self._last_trigger = time.monotonic()
        return end

    def plan(self, start: Positions, end: Positions) -> Plan:
        """The ranges of micro-batch [start, end), with the data-loss rules applied against fresh watermarks."""
        parts = set(_partitions(self.opts, self.broker))
        losses = data_loss.deleted_partitions(start, parts)
        live = sorted(tp for tp in end if tp in parts)
        wm = self.broker.watermarks(live)
        new = [tp for tp in live if tp not in start]
        losses += data_loss.new_partitions(new, wm)
        begin = {tp: start.get(tp, 0) for tp in live}
        losses += [e for e in data_loss.below_log_start(begin, wm) if TopicPartition(e.topic, e.partition) not in new]
        losses += data_loss.went_back(begin, end, wm)
        data_loss.enforce(losses, self.opts.fail_on_data_loss)
        back = [TopicPartition(e.topic, e.partition) for e in losses if e.kind == "offset_went_back"]
        begin = data_loss.skip_lost(begin, wm, back)
        finish = {tp: max(end[tp], begin[tp]) for tp in live}
        ranges = planner.ranges_between(begin, finish, option="offsets")
        return Plan(planner.split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition),
                    wm, losses, {tp: (begin[tp], finish[tp]) for tp in live})

"""The data-loss rules (docs/guarantees.md, "Data loss"): what counts as lost, and whether to fail or record and go
on."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from streamfill.connectors.kafka.offsets import Watermarks
from streamfill.errors import DataLossError
from streamfill.partitions import Positions, TopicPartition

log = logging.getLogger("streamfill.data_loss")

FAIL_ON_DATA_LOSS_HINT = (
    "Set failOnDataLoss=false to record the loss and continue from the first available offset, "
    "or restart from offsets that still exist (startingOffsets=earliest).")


@dataclass(frozen=True)
class DataLoss:
    """One data-loss event: records [lost_from, lost_to) of topic-partition are not readable."""

    topic: str
    partition: int
    kind: str
    lost_from: int
    lost_to: int

    def describe(self) -> str:
        if self.kind == "offset_went_back":
            return (f"data loss on {self.topic}-{self.partition}: the log now ends at offset {self.lost_from}, below "
                    f"the position {self.lost_to} already read (the topic was deleted and recreated, or its log "
                    f"truncated); what the old log held from {self.lost_to} on was never read, and the new log's "
                    "offsets up to that position would be skipped")
        what = {
            "partition_deleted": "the partition was deleted",
            "new_partition_not_from_zero": "a new partition's log does not start at offset 0",
            "start_below_log_start": "the requested start is below the broker's log-start offset",
            "aged_out_in_range": "records inside the planned range were deleted (retention or delete_records)",
        }[self.kind]
        return (f"data loss on {self.topic}-{self.partition}: {what}; offsets [{self.lost_from}, {self.lost_to}) "
                f"are lost")


def deleted_partitions(start: Positions, current: Iterable[TopicPartition]) -> list[DataLoss]:
    """Partitions read before that the broker no longer lists."""
    now = set(current)
    return [DataLoss(tp.topic, tp.partition, "partition_deleted", off, off)
            for tp, off in sorted(start.items()) if tp not in now]


def new_partitions(new: Iterable[TopicPartition], watermarks: Watermarks) -> list[DataLoss]:
    """A partition that appeared while running should start at 0; a later log start lost [0, log-start)."""
    return [DataLoss(tp.topic, tp.partition, "new_partition_not_from_zero", 0, watermarks[tp][0])
            for tp in sorted(new) if watermarks[tp][0] > 0]


def below_log_start(start: Positions, watermarks: Watermarks) -> list[DataLoss]:
    """Requested starts that retention or delete_records already removed."""
    return [DataLoss(tp.topic, tp.partition, "start_below_log_start", off, watermarks[tp][0])
            for tp, off in sorted(start.items()) if tp in watermarks and off < watermarks[tp][0]]


def beyond_log_end(start: Positions, watermarks: Watermarks) -> list[DataLoss]:
    """Positions past the log end: the partition's offsets went backwards (Spark reports the same: "offset was
    changed from A to B"). Reading goes on from the new log's first offset; [log end, position) is the gap."""
    return [DataLoss(tp.topic, tp.partition, "offset_went_back", watermarks[tp][1], off)
            for tp, off in sorted(start.items()) if tp in watermarks and off > watermarks[tp][1]]


def went_back(start: Positions, end: Positions, watermarks: Watermarks) -> list[DataLoss]:
    """In a batch's plan: Spark's end below its start (the round that chose the end saw the log end below the
    position), or the position past the log end now. The round's view wins: the log may have grown since."""
    out = []
    for tp, off in sorted(start.items()):
        if tp not in watermarks:
            continue
        if end.get(tp, off) < off or off > watermarks[tp][1]:
            out.append(DataLoss(tp.topic, tp.partition, "offset_went_back", min(watermarks[tp][1], off), off))
    return out


def enforce(events: list[DataLoss], fail_on_data_loss: bool) -> list[DataLoss]:
    """Raise naming every lost range when failOnDataLoss is true; otherwise log and return the events."""
    if not events:
        return events
    text = "; ".join(e.describe() for e in events)
    if fail_on_data_loss:
        raise DataLossError(f"{text}. {FAIL_ON_DATA_LOSS_HINT}", events)
    for e in events:
        log.warning("%s; continuing from the first available offset (failOnDataLoss=false)", e.describe())
    return events


def skip_lost(start: Positions, watermarks: Watermarks, went_back: Iterable[TopicPartition] = ()) -> Positions:
    """Where reading continues after a loss: the first available offset (of the new log, for a position past
    the log end or one whose offsets went back)."""
    back = set(went_back)

    def after(tp: TopicPartition, off: int) -> int:
        low, high = watermarks[tp]
        return low if off > high or tp in back else max(off, low)

    return {tp: after(tp, off) if tp in watermarks else off for tp, off in start.items()}

"""Topic-partitions and their offsets in the shapes Spark's Kafka source uses."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Positions = dict[TopicPartition, int]
"""An offset per topic-partition."""


def to_json_shape(positions: Positions) -> dict[str, dict[str, int]]:
    """Spark's checkpoint shape: {"topic": {"partition": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(positions):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return out


def from_json_shape(shape: dict[str, dict[str, int]]) -> Positions:
    return {TopicPartition(t, int(p)): int(o) for t, parts in shape.items() for p, o in parts.items()}

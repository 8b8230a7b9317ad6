"""subscribe / subscribePattern / assign: which topic-partitions a query reads, listed again at every round."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamfill.connectors.kafka.source_declarations import ASSIGN, SUBSCRIBE
from streamfill.errors import OptionError
from streamfill.partitions import TopicPartition

TopicMetadata = dict[str, int]
"""Topic name -> number of partitions, as the broker reports it."""


@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]

    def named(self) -> tuple[str, ...]:
        """The topics the subscription names (a pattern names none)."""
        return self.topics

    def partitions(self, metadata: TopicMetadata) -> list[TopicPartition]:
        unknown = [t for t in self.topics if t not in metadata]
        if unknown:
            raise OptionError(SUBSCRIBE.key, ",".join(self.topics), f"unknown topic(s) {', '.join(unknown)}",
                              "Create the topic first or fix its name; the broker has "
                              f"{_some(metadata)}")
        return [TopicPartition(t, p) for t in self.topics for p in range(metadata[t])]


@dataclass(frozen=True)
class SubscribePattern:
    pattern: str

    def named(self) -> tuple[str, ...]:
        return ()

    def partitions(self, metadata: TopicMetadata) -> list[TopicPartition]:
        rx = re.compile(self.pattern)
        return [TopicPartition(t, p) for t in sorted(metadata) if rx.fullmatch(t) and not t.startswith("__")
                for p in range(metadata[t])]


@dataclass(frozen=True)
class Assign:
    assignment: tuple[TopicPartition, ...]

    def named(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(tp.topic for tp in self.assignment))

    def partitions(self, metadata: TopicMetadata) -> list[TopicPartition]:
        for tp in self.assignment:
            if tp.topic not in metadata:
                raise OptionError(ASSIGN.key, tp.topic, f"unknown topic {tp.topic}",
                                  f"Create it first or fix its name; the broker has {_some(metadata)}")
            if tp.partition >= metadata[tp.topic]:
                raise OptionError(ASSIGN.key, str(tp), f"topic {tp.topic} has partitions 0..{metadata[tp.topic] - 1}",
                                  "Assign only partitions that exist")
        return list(self.assignment)


Subscription = Subscribe | SubscribePattern | Assign


def _some(metadata: TopicMetadata, n: int = 10) -> str:
    names = sorted(t for t in metadata if not t.startswith("__"))
    return ", ".join(names[:n]) + (" ..." if len(names) > n else "") if names else "no topics"

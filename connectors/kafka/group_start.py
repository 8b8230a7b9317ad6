"""A stream's start at a consumer group's committed offsets (`startingGroup`; an entry's `start: group:NAME`):
where a stopped Kafka Connect sink left off, so the stream takes each partition over at the first record the
connector had not written, and no record lands twice or never."""

from __future__ import annotations

import logging

from confluent_kafka.admin import AclOperation

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.offsets import CONNECT_GROUP_PREFIX, EARLIEST, SpecificOffsets
from streamfill.connectors.kafka.source_declarations import STARTING_GROUP
from streamfill.errors import BrokerRefused, OptionError
from streamfill.kafka_client import describe
from streamfill.partitions import TopicPartition

log = logging.getLogger("streamfill.source")


def stop_fix(group: str) -> str:
    """How to empty a group a Kafka Connect sink reads with: stop the connector (its tasks commit as they close)."""
    name = group[len(CONNECT_GROUP_PREFIX):] if group.startswith(CONNECT_GROUP_PREFIX) else "<connector name>"
    return (f"Stop the connector first (curl -X PUT http://<connect>/connectors/{name}/stop; not pause, whose "
            "tasks stay members) and launch again once the group has no members")


def require_idle(group: str, broker: Broker) -> None:
    """Refuse while the group has live members: a running connector reads and writes the same records."""
    members = broker.group_members(group, AclOperation.DESCRIBE)
    if members:
        raise BrokerRefused(f"consumer group {group!r} on {describe(broker.kafka)} has live members ({members}): a "
                            f"running consumer, such as a Kafka Connect sink, would write the records the stream "
                            f"reads. {stop_fix(group)}")


def offsets_of(group: str, partitions: list[TopicPartition], broker: Broker) -> SpecificOffsets:
    """Each partition's start: the group's committed offset, or earliest where it has none (a Connect sink's
    auto.offset.reset=earliest). Asked with the group idle before and after, so no member commits in between."""
    require_idle(group, broker)
    committed = broker.committed_offsets(group, partitions)
    require_idle(group, broker)
    if partitions and not committed:
        topics = ", ".join(sorted({tp.topic for tp in partitions}))
        raise OptionError(STARTING_GROUP.key, group, f"has no committed offset for any partition of {topics} on "
                          f"{describe(broker.kafka)}", "Check the group's name: a Kafka Connect sink's is connect-"
                          "<connector name>, or its consumer.override.group.id. A connector that never committed "
                          "wrote nothing: start at earliest instead")
    missing = sorted(tp for tp in partitions if tp not in committed)
    if missing:
        log.info("consumer group %s has no committed offset for %s: starting there at the earliest offset, as a "
                 "Kafka Connect sink does (auto.offset.reset=earliest)", group, ", ".join(map(str, missing)))
    log.info("starting at the committed offsets of consumer group %s: %s", group,
             ", ".join(f"{tp}: {off}" for tp, off in sorted(committed.items())))
    return SpecificOffsets(tuple(sorted(committed.items())) + tuple((tp, EARLIEST) for tp in missing))

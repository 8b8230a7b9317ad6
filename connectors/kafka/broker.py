"""The only code that asks the broker about topics and offsets (Spark's KafkaOffsetReaderAdmin), the one place
that writes a consumer group's committed offsets (`commitToGroup`), and the one that creates topics."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from connectors.kafka.offsets import Watermarks
from connectors.kafka.subscription import TopicMetadata
from streamfill.errors import BrokerError, OptionError
from streamfill.partitions import TopicPartition

# librdkafka properties that make sense for a consumer but not for an AdminClient
_CONSUMER_ONLY = {"isolation.level", "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms",
                  "max.partition.fetch.bytes", "fetch.message.max.bytes", "queued.min.messages",
                  "queued.max.messages.kbytes", "fetch.queue.backoff.ms", "check.crcs", "session.timeout.ms",
                  "heartbeat.interval.ms", "auto.commit.interval.ms", "max.poll.interval.ms", "enable.partition.eof",
                  "client.rack"}


class Broker:
    """Topic metadata and offsets, each in one batched request, with bounded timeouts."""

    def __init__(self, kafka: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self.kafka = dict(kafka)
        self.timeout_s = timeout_s
        conf = {k: v for k, v in self.kafka.items() if k not in _CONSUMER_ONLY}
        self._admin = AdminClient({**conf, "log_level": conf.get("log_level", "3")})
        committed = self.kafka.get("isolation.level", "read_committed") == "read_committed"
        self._isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    def _fail(self, what: str, exc: BaseException, started: float) -> BrokerError:
        return BrokerError(f"{what} failed after {time.monotonic() - started:.1f} s against "
                           f"bootstrap servers {self.kafka.get('bootstrap.servers')}: {exc}. "
                           "Check that the broker is running and kafka.bootstrap.servers is right")

    def topics(self) -> TopicMetadata:
        started = time.monotonic()
        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._fail("listing topics", exc, started) from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def _list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec], what: str) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        started = time.monotonic()
        futures = self._admin.list_offsets(
            {KTopicPartition(tp.topic, tp.partition): s for tp, s in specs.items()},
            isolation_level=self._isolation, request_timeout=self.timeout_s)
        out: dict[TopicPartition, int] = {}
        try:
            for ktp, fut in futures.items():
                out[TopicPartition(ktp.topic, ktp.partition)] = fut.result(timeout=self.timeout_s).offset
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout
            raise self._fail(what, exc, started) from None
        return out

    def watermarks(self, partitions: list[TopicPartition]) -> Watermarks:
        """(log-start, log-end) per partition; log-end is the last stable offset under read_committed."""
        low = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "listing earliest offsets")
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "listing latest offsets")
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def offsets_for_times(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ms) for tp, ms in times.items()},
                                   "looking up offsets for timestamps")
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def commit_group(self, group: str, positions: Mapping[TopicPartition, int]) -> None:
        """Set the group's committed offsets (next offset to read), so Kafka's lag tools see the job.

        Kafka refuses this while the group has active members: a group used only for this mirror has none.
        """
        if not positions:
            return
        started = time.monotonic()
        request = ConsumerGroupTopicPartitions(group, [KTopicPartition(tp.topic, tp.partition, off)
                                                       for tp, off in sorted(positions.items())])
        futures = self._admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        try:
            for fut in futures.values():
                fut.result(timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"committing offsets to consumer group {group!r}", exc, started) from None

    def ensure_topic(self, topic: str, partitions: int | None = None) -> int:
        """The topic's partition count, creating it when missing (one partition unless `partitions` says)."""
        have = self.topics().get(topic)
        if have is not None:
            if partitions is not None and partitions != have:
                raise OptionError("--partitions", partitions, f"does not match topic {topic!r}, which exists with "
                                  f"{have} partitions", "leave --partitions out or use another topic")
            return have
        want = partitions or 1
        started = time.monotonic()
        fut = self._admin.create_topics([NewTopic(topic, num_partitions=want, replication_factor=1)])[topic]
        try:
            fut.result(timeout=self.timeout_s)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise self._fail(f"creating topic {topic!r}", exc, started) from None
        return want

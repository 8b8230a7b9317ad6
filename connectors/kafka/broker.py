"""The only code that asks the broker about topics and offsets (Spark's KafkaOffsetReaderAdmin), the one place
that writes a consumer group's committed offsets (`commitToGroup`), and the one that creates topics."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, OffsetSpec

from streamfill.connectors.kafka.client import not_authorized, refusal
from streamfill.connectors.kafka.offsets import Watermarks
from streamfill.connectors.kafka.subscription import TopicMetadata
from streamfill.errors import BrokerError, BrokerRefused, OptionError
from streamfill.kafka_client import DEFAULT_GROUP_ID, describe
from streamfill.partitions import TopicPartition

# librdkafka properties that make sense for a consumer but not for an AdminClient
_CONSUMER_ONLY = {"isolation.level", "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms",
                  "max.partition.fetch.bytes", "fetch.message.max.bytes", "queued.min.messages",
                  "queued.max.messages.kbytes", "fetch.queue.backoff.ms", "check.crcs", "session.timeout.ms",
                  "heartbeat.interval.ms", "auto.commit.interval.ms", "max.poll.interval.ms", "enable.partition.eof",
                  "client.rack"}


DEFAULT_TIMEOUT_S = 30.0
_FIRST_RETRY_PAUSE_S = 0.1

# A partition just created, or whose leader moves, answers these for a moment.
_LEADERSHIP_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                KafkaError.OFFSET_NOT_AVAILABLE})


def retriable(exc: BaseException) -> bool:
    """An error a repeated request can overcome: Kafka says so, or the partition's leadership is moving."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _LEADERSHIP_MOVING)


def _request_timeout_s(kafka: Mapping[str, str]) -> float:
    raw = kafka.get("socket.timeout.ms")
    try:
        return max(1.0, float(raw) / 1000) if raw is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S  # librdkafka refuses the setting itself, naming it


# a group's coordinator that moved or is still loading its groups: asked again, it answers
_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)

class Broker:
    """Topic metadata and offsets, each in one batched request, with bounded timeouts."""

    def __init__(self, kafka: Mapping[str, str], timeout_s: float | None = None) -> None:
        self.kafka = dict(kafka)
        # a request waits at most librdkafka's network request timeout when the client sets it
        self.timeout_s = timeout_s or _request_timeout_s(self.kafka)
        self._refused: str | None = None  # the client's credentials or trust refused: retrying cannot help
        self._allowed: set[tuple[str, str]] = set()  # (topic, operation) the broker said this user may do
        conf = {k: v for k, v in self.kafka.items() if k not in _CONSUMER_ONLY}
        admin = {k: v for k, v in conf.items() if k != "group.id"}  # a consumer's property: AdminClient warns
        self._admin = AdminClient({**admin, "log_level": conf.get("log_level", "3"), "error_cb": self._on_error})
        committed = self.kafka.get("isolation.level", "read_committed") == "read_committed"
        self._isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    @property
    def refused(self) -> str | None:
        """Why the cluster refused this client's credentials or trust, once it has."""
        return self._refused

    def _on_error(self, err: KafkaError) -> None:
        self._refused = self._refused or refusal(self.kafka, err.str())

    def _fail(self, what: str, exc: BaseException, started: float) -> BrokerError:
        self._admin.poll(0)  # serves error_cb: an authentication or TLS refusal says more than the timeout
        self._refused = self._refused or refusal(self.kafka, str(exc))
        if self._refused:
            return BrokerRefused(f"{what} failed: {self._refused}")
        return BrokerError(f"{what} failed after {time.monotonic() - started:.1f} s against "
                           f"{describe(self.kafka)}: {exc}. "
                           "Check that the broker is running and kafka.bootstrap.servers is right")

    def topics(self) -> TopicMetadata:
        """Every topic this client may describe; a refused login fails at once rather than at the timeout."""
        started = time.monotonic()
        while True:
            left = self.timeout_s - (time.monotonic() - started)
            try:
                md = self._admin.list_topics(timeout=max(0.1, min(1.0, left)))
                break
            except KafkaException as exc:
                self._admin.poll(0)
                if self._refused or left <= 1.0:
                    raise self._fail("listing topics", exc, started) from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def readable(self, topics: Sequence[str]) -> TopicMetadata:
        """topics() once the login is accepted and the user may read each of `topics` (a topic the authorizer
        hides is named as such, not as unknown)."""
        metadata = self.topics()  # first: a refused login or certificate fails here at once
        self.require(topics, "read")
        return metadata

    def require(self, topics: Sequence[str], operation: str) -> None:
        """Refuse, naming the topic and the missing ACL operation, when the broker's authorizer does not let
        this client's user `operation` ("read" or "write") each topic. Asked once per topic and operation."""
        wanted = sorted({t for t in topics if (t, operation) not in self._allowed})
        if not wanted:
            return
        started = time.monotonic()
        futures = self._admin.describe_topics(TopicCollection(wanted), include_authorized_operations=True,
                                              request_timeout=self.timeout_s)
        needed = AclOperation.READ if operation == "read" else AclOperation.WRITE
        for topic, fut in futures.items():
            try:
                found = fut.result(timeout=self.timeout_s)
            except KafkaException as exc:
                code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise BrokerRefused(not_authorized(self.kafka, topic, "describe")) from None
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # the caller says the topic is unknown, naming the ones there are
                raise self._fail(f"describing topic {topic!r}", exc, started) from None
            granted = found.authorized_operations  # None: the broker runs no authorizer
            if granted is not None and needed not in granted and AclOperation.ALL not in granted:
                raise BrokerRefused(not_authorized(self.kafka, topic, operation))
            self._allowed.add((topic, operation))

    def _list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec], what: str) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        started = time.monotonic()
        pause = _FIRST_RETRY_PAUSE_S
        while True:
            futures = self._admin.list_offsets(
                {KTopicPartition(tp.topic, tp.partition): s for tp, s in specs.items()},
                isolation_level=self._isolation, request_timeout=self.timeout_s)
            out: dict[TopicPartition, int] = {}
            try:
                for ktp, fut in futures.items():
                    out[TopicPartition(ktp.topic, ktp.partition)] = fut.result(timeout=self.timeout_s).offset
                return out
            except Exception as exc:  # KafkaException or a timeout
                # Ask again, as Spark's fetchOffset.numRetries does, while the timeout allows.
                if not retriable(exc) or time.monotonic() - started + pause > self.timeout_s:
                    raise self._fail(what, exc, started) from None
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def watermarks(self, partitions: list[TopicPartition]) -> Watermarks:
        """(log-start, log-end) per partition; log-end is the last stable offset under read_committed."""
        low = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "listing earliest offsets")
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "listing latest offsets")
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def offsets_for_times(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ms) for tp, ms in times.items()},
                                   "looking up offsets for timestamps")
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def record_timestamps(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The Kafka timestamp (ms) of the record at each offset, for the partitions where one is there (not a
        transaction marker, not yet removed by retention); fetched by a consumer that joins no group."""
        from confluent_kafka import Consumer

        wanted = {tp: off for tp, off in offsets.items() if off >= 0}
        if not wanted:
            return {}
        consumer = Consumer({"group.id": DEFAULT_GROUP_ID, **self.kafka, "enable.auto.commit": False,
                             "enable.auto.offset.store": False, "log_level": self.kafka.get("log_level", "3")})
        found: dict[TopicPartition, int] = {}
        left = dict(wanted)
        try:
            consumer.assign([KTopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(wanted.items())])
            deadline = time.monotonic() + self.timeout_s
            while left and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(left), timeout=0.2):
                    tp = TopicPartition(message.topic(), message.partition())
                    if message.error() is not None or tp not in left:
                        continue
                    if message.offset() == left[tp]:
                        found[tp] = message.timestamp()[1]
                    del left[tp]  # past it: a transaction marker stood there, which has no timestamp to give
                    consumer.pause([KTopicPartition(tp.topic, tp.partition)])
        finally:
            consumer.close()
        return found

    def holds(self, offsets: Mapping[TopicPartition, Sequence[int]]) -> set[tuple[TopicPartition, int]]:
        """Which of these offsets still hold a record a reader gets (compaction drops records, a transaction's
        marker or aborted record is none), fetched by a consumer that joins no group: per partition, the first
        record at or after each offset asked. An offset whose answer does not come in time counts as held."""
        from confluent_kafka import Consumer

        wanted = {tp: sorted(set(found)) for tp, found in offsets.items() if found}
        if not wanted:
            return set()
        consumer = Consumer({"group.id": DEFAULT_GROUP_ID, **self.kafka, "enable.auto.commit": False,
                             "enable.auto.offset.store": False, "enable.partition.eof": True,
                             "log_level": self.kafka.get("log_level", "3")})
        held: set[tuple[TopicPartition, int]] = set()
        try:
            for tp, todo in sorted(wanted.items()):
                i = 0
                while i < len(todo):
                    first = self._first_record(consumer, tp, todo[i])
                    # every offset asked below the first record there is one the partition no longer holds
                    while i < len(todo) and (first is None or todo[i] <= first):
                        if todo[i] == first:
                            held.add((tp, first))
                        i += 1
        finally:
            consumer.close()
        return held

    def _first_record(self, consumer, tp: TopicPartition, offset: int) -> int | None:
        """The offset of the first record at or after `offset` (None: none before the partition's end); `offset`
        itself when no answer comes within the timeout."""
        consumer.assign([KTopicPartition(tp.topic, tp.partition, offset)])
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1, timeout=0.2):
                if message.topic() != tp.topic or message.partition() != tp.partition:
                    continue
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return None
                if error is not None:
                    raise BrokerError(f"reading {tp} at offset {offset} failed: {error.str()}")
                if message.offset() < offset:
                    continue  # fetched for the assignment before
                return message.offset()
        return offset

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
        except Exception as exc:  # KafkaException or a timeout
            raise self._fail(f"committing offsets to consumer group {group!r}", exc, started) from None

    def require_group(self, group: str) -> None:
        """Refuse, naming the group and the fix, when commit_group could not work: no ACL lets this client's user
        READ the group, or the group has live members (Kafka refuses offsets committed from outside them)."""
        hosts = self.group_members(group, AclOperation.READ)
        if hosts:
            raise BrokerRefused(f"consumer group {group!r} on {describe(self.kafka)} has live members ({hosts}): Kafka "
                              "refuses offsets committed from outside them. Give commitToGroup a group no consumer "
                              "joins, one kept for this job's lag")

    def group_members(self, group: str, operation: AclOperation) -> str:
        """The group's live members as "client on host, ..." (empty: none); refused, naming the group, when no ACL
        lets this client's user do `operation` (READ, DESCRIBE) on it."""
        found = self._group_answer(
            group, operation.name.lower(), f"describing consumer group {group!r}",
            lambda: self._admin.describe_consumer_groups([group], include_authorized_operations=True,
                                                         request_timeout=self.timeout_s)[group])
        granted = found.authorized_operations  # None: the broker runs no authorizer
        implied = {operation, AclOperation.ALL} | ({AclOperation.READ} if operation == AclOperation.DESCRIBE else set())
        if granted is not None and not implied & set(granted):
            raise BrokerRefused(not_authorized(self.kafka, group, operation.name.lower(), "consumer group"))
        return ", ".join(sorted({f"{m.client_id} on {m.host}" for m in found.members}))

    def _group_answer(self, group: str, operation: str, what: str, ask: Callable[[], Future]) -> Any:
        """The answer of a request about a consumer group (`ask` sends it); asked again while the group's coordinator
        moves, refused naming the group when this client's user may not `operation` it."""
        started = time.monotonic()
        while True:
            future = ask()
            try:
                return future.result(timeout=self.timeout_s)
            except Exception as exc:  # KafkaException or a timeout
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    raise BrokerRefused(not_authorized(self.kafka, group, operation, "consumer group")) from None
                # a coordinator that is moving or still loading its groups answers again shortly
                moving = error is not None and (error.retriable() or error.code() in _COORDINATOR_MOVING)
                if moving and time.monotonic() - started < self.timeout_s:
                    time.sleep(0.2)
                    continue
                raise self._fail(what, exc, started) from None

    def committed_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offset (the next record to read) of each of `partitions` that has one."""
        if not partitions:
            return {}
        request = ConsumerGroupTopicPartitions(group, [KTopicPartition(tp.topic, tp.partition)
                                                       for tp in sorted(partitions)])
        found = self._group_answer(
            group, "describe", f"reading the committed offsets of consumer group {group!r}",
            lambda: self._admin.list_consumer_group_offsets([request], request_timeout=self.timeout_s)[group])
        out: dict[TopicPartition, int] = {}
        for ktp in found.topic_partitions:
            if ktp.error is not None:
                raise BrokerError(f"reading the committed offset of {ktp.topic}-{ktp.partition} in consumer group "
                                  f"{group!r} on {describe(self.kafka)} failed: {ktp.error.str()}")
            if ktp.offset >= 0:  # librdkafka's OFFSET_INVALID (-1001): nothing committed for the partition
                out[TopicPartition(ktp.topic, ktp.partition)] = ktp.offset
        return out

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
        self._wait_for_leaders(topic, started)
        return want

    def _wait_for_leaders(self, topic: str, started: float) -> None:
        """A new topic's partitions get their leaders a moment after the creation returns; until then a read of
        its offsets fails with NOT_LEADER_FOR_PARTITION, so the caller gets the topic once every one has a leader."""
        while True:
            try:
                parts = self._admin.list_topics(topic, timeout=self.timeout_s).topics[topic].partitions
                if parts and all(p.leader >= 0 and p.error is None for p in parts.values()):
                    return
            except KafkaException as exc:
                if time.monotonic() - started > self.timeout_s:
                    raise self._fail(f"waiting for the leaders of topic {topic!r}", exc, started) from None
            if time.monotonic() - started > self.timeout_s:
                raise BrokerError(f"topic {topic!r} has partitions without a leader {self.timeout_s:.0f} s after it "
                                  "was created; check the brokers' logs")
            time.sleep(0.1)

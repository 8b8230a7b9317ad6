"""`streamfill_kafka` as a sink (df.write and writeStream), with Spark's Kafka sink columns and semantics.

Default mode: at least once. Each task sends asynchronously and flushes before it ends; the first delivery
error fails the task. A retried task or a replayed micro-batch sends its records again.
`transactional=true`: each task's records are one Kafka transaction under the id `<prefix>-<partition id>`;
a retry of that task fences and aborts the earlier attempt, so read_committed consumers see each record of a
retried task once when the attempt failed in the sink (delivery error, lost Python worker or executor).
It does not make a whole job atomic: a task that committed stays committed if another task then fails the
job, and a micro-batch replayed after a driver crash is sent again; and when a Python UDF earlier in the same
stage raises, Spark ends the writer's input normally and it commits, so that attempt's records are visible too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from streamfill.connectors.kafka.client import client_config
from streamfill.connectors.kafka.kafka_sink_declarations import (
    KAFKA_BOOTSTRAP_SERVERS,
    KAFKA_PROPERTIES,
    TOPIC,
    TRANSACTIONAL,
    TRANSACTIONAL_ID_PREFIX,
)
from streamfill.connectors.kafka.writer import write_batches
from streamfill.connectors.spark import worker_gc
from streamfill.declarations import boolean
from streamfill.errors import OptionError

# set by the sink itself
_FORBIDDEN = {"transactional.id", "key.serializer", "value.serializer"}


@dataclass(frozen=True)
class KafkaSinkOptions:
    kafka: dict[str, str]
    topic: str | None
    transactional_prefix: str | None


@dataclass
class Sent(WriterCommitMessage):
    records: int


def parse(options: dict, schema: StructType) -> KafkaSinkOptions:
    opts = {k.lower(): str(v) for k, v in options.items()}
    kafka = {k[len(KAFKA_PROPERTIES.prefix):]: v for k, v in opts.items() if k.startswith(KAFKA_PROPERTIES.prefix)}
    if not opts.get(KAFKA_BOOTSTRAP_SERVERS.name):
        raise OptionError(KAFKA_BOOTSTRAP_SERVERS.key, None, "is required",
                          "Set it to the broker list, e.g. .option('kafka.bootstrap.servers', 'host:9092')")
    for key in sorted(_FORBIDDEN & set(kafka)):
        raise OptionError(f"{KAFKA_PROPERTIES.prefix}{key}", kafka[key], "is managed by the sink",
                          "Remove it; use transactional=true for transactions")
    fields = {f.name: f.dataType for f in schema.fields}
    topic = opts.get(TOPIC.name)
    if "value" not in fields:
        raise OptionError("value", None, f"the DataFrame has no value column (columns: {', '.join(fields)})",
                          "Add a string or binary column named value")
    for name, allowed in (("value", (StringType, BinaryType)), ("key", (StringType, BinaryType)),
                          ("topic", (StringType,)), ("partition", (IntegerType,))):
        if name in fields and not isinstance(fields[name], allowed):
            raise OptionError(name, fields[name].simpleString(), "has a type the Kafka sink cannot send",
                              f"Cast it to {' or '.join(t.typeName() for t in allowed)}")
    if "headers" in fields and not (isinstance(fields["headers"], ArrayType)
                                    and isinstance(fields["headers"].elementType, StructType)):
        raise OptionError("headers", fields["headers"].simpleString(), "is not array<struct<key,value>>",
                          "Use array<struct<key:string,value:binary>>")
    if topic is None and "topic" not in fields:
        raise OptionError("topic", None, "there is neither a topic option nor a topic column",
                          "Set .option('topic', 'name') or add a topic column")
    prefix = None
    if boolean(opts, TRANSACTIONAL):
        prefix = opts.get(TRANSACTIONAL_ID_PREFIX.name) or f"streamfill-{uuid.uuid4().hex[:12]}"
    return KafkaSinkOptions(client_config(kafka), topic, prefix)


def check_access(opts: KafkaSinkOptions) -> None:
    """On the driver, before any task sends, for a client with credentials or TLS: the cluster accepts them,
    and its authorizer lets the user write the `topic` option's topic (a topic column's topics are checked by
    each delivery). A broker that does not answer is left to the tasks, whose delivery errors name it."""
    from streamfill.connectors.kafka.broker import Broker
    from streamfill.errors import BrokerError

    if opts.kafka.get("security.protocol", "PLAINTEXT") == "PLAINTEXT":
        return
    broker = Broker(opts.kafka, timeout_s=10)
    try:
        broker.topics()
    except BrokerError:
        if broker.refused is None:
            return
        raise
    if opts.topic:
        broker.require([opts.topic], "write")


def _write(opts: KafkaSinkOptions, batches: Iterator[pa.RecordBatch]) -> Sent:
    worker_gc.freeze_after_imports()
    tx_id = None
    if opts.transactional_prefix:
        # the same id for every attempt of this task partition: a retry fences the attempt before it
        tx_id = f"{opts.transactional_prefix}-{TaskContext.get().partitionId()}"
    return Sent(write_batches(batches, opts.kafka, opts.topic, tx_id))


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: KafkaSinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:
        return _write(self.opts, iterator)


class KafkaStreamWriter(KafkaBatchWriter, DataSourceStreamArrowWriter):
    """A batch writer with the micro-batch's commit and abort, which have nothing left to do."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every task flushed (and committed its transaction) before it returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

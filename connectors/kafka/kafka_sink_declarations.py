"""Every option of `streamfill_kafka` as a sink, declared once: its key, default and the row of docs/connectors.md
that explains it (`make docs-options` writes the table)."""

from __future__ import annotations

from streamfill.declarations import Option

# the producer's settings under the sink's own `kafka.*` options: Spark's delivery timeout (librdkafka's own is
# 300 s), and records batched for a few milliseconds and compressed, for fewer and smaller requests
PRODUCER_DEFAULTS = {"delivery.timeout.ms": "120000", "linger.ms": "5", "compression.type": "lz4"}

KAFKA_BOOTSTRAP_SERVERS = Option(
    "kafka.bootstrap.servers", required=True, group="kafka",
    doc='passed to the producer, over streamfill\'s defaults '
        + ", ".join(f"`kafka.{key}` {value}" for key, value in PRODUCER_DEFAULTS.items())
        + ' (each overridden by the option of that name; the delivery timeout is Spark\'s 120 s). '
        '`kafka.transactional.id`, `kafka.key.serializer` and `kafka.value.serializer` are refused: the sink sets '
        'them.')
KAFKA_PROPERTIES = Option("kafka.*", group="kafka")  # every other `kafka.` option goes to the producer as it is
TOPIC = Option(
    "topic",
    doc='the topic every row goes to, over a `topic` column; without it, each row\'s `topic` column names its '
        'topic.')
TRANSACTIONAL = Option(
    "transactional", default="false",
    doc='`true`: each task\'s records are one Kafka transaction (see the modes below). Default `{default}`.')
TRANSACTIONAL_ID_PREFIX = Option(
    "transactionalIdPrefix",
    doc='with `transactional=true`: the transactions\' ids are `<prefix>-<task partition>`. Default: '
        '`streamfill-` and 12 random hex digits, new for each write.')

# the docs table's order
SINK_OPTIONS = (KAFKA_BOOTSTRAP_SERVERS, KAFKA_PROPERTIES, TOPIC, TRANSACTIONAL, TRANSACTIONAL_ID_PREFIX)

"""The stream's query: the entry's topic(s) read and parsed, the table checked or changed for it, and its start
as a streaming write into the sink."""

from __future__ import annotations

from collections.abc import Mapping

from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.spark_jobs.entry_sink import sink_options
from streamfill.spark_jobs.kafka_read import kafka_reader, rows_of
from streamfill.spark_jobs.lineage_io import LineageIO, lineage_io
from streamfill.spark_jobs.stream_args import StreamArgs
from streamfill.trigger_grammar import parse_trigger


def query_plan(spark, args: StreamArgs, kafka: Mapping[str, str], url: str, generation: int | None = None,
               change: bool = True, source: Mapping[str, str] | None = None):
    """The entry's topic(s) through its parse, and the sink's options. The table is created, checked or evolved
    here, so a mismatch is refused before anything is read or recorded; with `change` False only checked (before
    the launch holds its job). `generation` is this launch's hold on the job: its plans and commits carry it.
    `source`: more options of the source (a detached stream's jobRun)."""
    from streamfill.connectors.spark import register
    from streamfill.connectors.spark.postgres_plan import prepare_table

    register(spark)
    spec = args.spec
    reader = (kafka_reader(spark.readStream, spec, args.job, kafka, url, generation)
              .option(*args.subscription).option(*args.start_option)
              .options(**packing(spark)).options(**(source or {})))
    if args.max_offsets_per_trigger:
        reader = reader.option(kafka_source.MAX_OFFSETS_PER_TRIGGER.key, str(args.max_offsets_per_trigger))
    if spec.commit_to_group:
        reader = reader.option(kafka_source.COMMIT_TO_GROUP.key, spec.commit_to_group)
    rows = rows_of(spec, reader.load())
    options = sink_options(spec, args.job, args.table, spec.mode, url, generation)
    prepare_table(options, rows.schema, change)
    return rows, options


def packing(spark) -> dict[str, str]:
    """On a local master, one task per core reads a micro-batch (maxPartitions), so a small batch pays a task's
    start-up once per core instead of once per partition. A cluster's cores are not known when the query starts
    (executors come and go), so there each Kafka partition keeps its own task, as in Spark's Kafka source."""
    from streamfill.connectors.spark import is_connect

    if is_connect(spark):  # a server's session: its master and parallelism are its settings
        master, cores = spark.conf.get("spark.master", ""), spark.conf.get("spark.default.parallelism", None)
    else:
        master, cores = spark.sparkContext.master, str(spark.sparkContext.defaultParallelism)
    if not master.startswith("local") or cores is None:
        return {}
    return {kafka_source.MAX_PARTITIONS.key: cores}


def start(spark, args: StreamArgs, kafka: Mapping[str, str], url: str, plan=None):
    rows, options = plan or query_plan(spark, args, kafka, url)
    return (rows.writeStream.format("streamfill_postgres")
            .options(**options)
            .option("checkpointLocation", str(args.checkpoint))
            .queryName(f"streamfill-{args.job}")
            .trigger(**parse_trigger(args.trigger)).start())


def check_access(args: StreamArgs, kafka: Mapping[str, str]) -> None:
    """The cluster takes the launch's credentials and lets its user read the topics it names (a pattern's are
    checked as the source plans them): a refusal comes before a table is made or the job recorded."""
    from streamfill.connectors.kafka.broker import Broker

    kind, topics = args.subscription
    Broker(kafka).readable([t for t in topics.split(",") if t] if kind == kafka_source.SUBSCRIBE.key else [])


def check_start(args: StreamArgs, kafka: Mapping[str, str], url: str) -> None:
    """A first launch that starts at a consumer group's offsets (`start: group:NAME`) is refused while the group
    has live members (a running Kafka Connect sink), before the job is held or anything recorded. The source
    checks again as it reads the group; a job with a position in offsets_db never reads it."""
    from streamfill.connectors.kafka import group_start
    from streamfill.connectors.kafka.broker import Broker
    from streamfill.connectors.kafka.offsets import GroupOffsets
    from streamfill.offsets_db.store import OffsetStore

    start = args.start_spec
    if not isinstance(start, GroupOffsets):
        return
    store = OffsetStore(url)
    if store.snapshot(args.job) or store.first_start(args.job):
        return
    group_start.require_idle(start.group, Broker(kafka))


def stream_lineage_io(args: StreamArgs, kafka: Mapping[str, str], url: str) -> LineageIO:
    """The topics the stream subscribes to (or its pattern) and its table, for its OpenLineage events."""
    kind, value = args.subscription
    topics = value.split(",") if kind == kafka_source.SUBSCRIBE.key else [value]
    return lineage_io(args.spec, topics, kafka, url, args.table, "STREAMING")

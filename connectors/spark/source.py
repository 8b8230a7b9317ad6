"""`streamfill_kafka`: the connector core as a PySpark Python data source, bounded and streaming."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from streamfill import failpoints
from streamfill.connectors.kafka import options as source_options
from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.enumerator import Plan, StreamEnumerator, plan_bounded
from streamfill.connectors.kafka.json_values import JsonColumns
from streamfill.connectors.kafka.offsets import Earliest
from streamfill.connectors.kafka.options import SourceOptions
from streamfill.connectors.kafka.planner import OffsetRange, offsets_behind, pack_ranges
from streamfill.connectors.kafka.reader import read_range
from streamfill.connectors.kafka.source_declarations import INCLUDE_HEADERS, JSON_COLUMNS
from streamfill.connectors.spark import worker_gc
from streamfill.errors import DataLossError
from streamfill.partitions import from_json_shape, to_json_shape

if TYPE_CHECKING:
    from streamfill.connectors.spark.job_offsets import JobTracker

log = logging.getLogger("streamfill.source")

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS = ", headers array<struct<key:string,value:binary>>"


class RangePartition(InputPartition):
    """What one Spark task reads: one offset range, or several small ones (maxPartitions)."""

    def __init__(self, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(ranges)


def _tasks(opts: SourceOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    return [RangePartition(group) for group in pack_ranges(ranges, opts.max_partitions,
                                                           opts.max_records_per_partition)]


def _tracker(opts: SourceOptions, kind: str) -> JobTracker | None:
    """The job's recorder in offsets_db, on the driver. Its module (SQLAlchemy, the exactly-once protocol) is
    imported here and not at the top, so the read tasks' cold Python workers do not load it."""
    if opts.job is None:
        return None
    from streamfill.connectors.spark.job_offsets import JobTracker, job_config

    return JobTracker(opts.job, opts.offsets_db_url, kind, job_config(opts), generation=opts.job_generation,
                      wait_ms=opts.wait_for_job_ms, run_id=opts.job_run)


def _recording_loss(tracker: JobTracker | None, plan: Callable[[], Plan]) -> Plan:
    """Data loss that fails the query (failOnDataLoss=true) is still recorded in offsets_db for the job."""
    try:
        return plan()
    except DataLossError as exc:
        if tracker is not None and exc.events:
            tracker.record_losses(exc.events)
        raise


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    worker_gc.freeze_after_imports()
    # an empty plan reaches the task as a bare InputPartition with no range
    for r in partition.value if isinstance(partition.value, tuple) else ():
        yield from read_range(r, opts.kafka, include_headers=opts.include_headers,
                              poll_timeout_ms=opts.poll_timeout_ms, fail_on_data_loss=opts.fail_on_data_loss,
                              json_columns=opts.json_columns)


class KafkaDataSource(DataSource):
    """.format("streamfill_kafka") with Spark's Kafka option names: a source for spark.read and
    spark.readStream, a sink for df.write and writeStream (`kafka_sink`)."""

    @classmethod
    def name(cls) -> str:
        return "streamfill_kafka"

    def schema(self) -> str:
        worker_gc.freeze_after_imports()
        include = str(self.options.get(INCLUDE_HEADERS.key, INCLUDE_HEADERS.default)).lower() == "true"
        typed = self.options.get(JSON_COLUMNS.key)
        return (SCHEMA + (HEADERS if include else "")
                + (", " + JsonColumns.from_option(typed).spark_schema if typed is not None else ""))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(source_options.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(source_options.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from streamfill.connectors.spark import kafka_sink  # only a write loads the producer side

        opts = kafka_sink.parse(self.options, schema)
        kafka_sink.check_access(opts)
        return kafka_sink.KafkaBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from streamfill.connectors.spark import kafka_sink

        opts = kafka_sink.parse(self.options, schema)
        kafka_sink.check_access(opts)
        return kafka_sink.KafkaStreamWriter(opts)


def _broker(kafka: dict[str, str]) -> Broker:
    """One admin client per configuration in this planning process (Spark keeps it for the next plan): a
    backfill plans a read per chunk, and need not connect and fetch metadata anew for each."""
    return _broker_for(frozenset(kafka.items()))


@functools.lru_cache(maxsize=8)
def _broker_for(kafka: frozenset) -> Broker:
    return Broker(dict(kafka))


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        worker_gc.freeze_after_imports()
        tracker = _tracker(self.opts, "backfill")  # with the launch's jobGeneration: it holds the job
        plan = _recording_loss(tracker, lambda: plan_bounded(self.opts, _broker(self.opts.kafka)))
        if tracker is not None:
            tracker.record(plan, start=None)  # before any task reads; the sink's commit finalises it
        return _tasks(self.opts, plan.ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning on the driver; the offset in Spark's checkpoint is {"topic": {"partition": n}}."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._enumerator: StreamEnumerator | None = None
        self._tracker: JobTracker | None = None
        self._fresh = False  # Spark asked for the initial offset: no checkpoint to resume from

    def __getstate__(self) -> dict:
        # executors only need the options; enumerator and tracker hold clients and driver-side state
        return {"opts": self.opts, "_enumerator": None, "_tracker": None, "_fresh": False}

    @property
    def enumerator(self) -> StreamEnumerator:
        if self._enumerator is None:
            self._enumerator = StreamEnumerator(self.opts, Broker(self.opts.kafka))
        return self._enumerator

    @property
    def tracker(self) -> JobTracker | None:
        if self._tracker is None:
            self._tracker = _tracker(self.opts, "stream")
        return self._tracker

    def initialOffset(self) -> dict:
        """With a job and no checkpoint, the stream resumes where offsets_db says the job stands."""
        self._fresh = True
        resume = self.tracker.resume() if self.tracker else None
        if resume:
            log.info("job %s resumes from offsets_db: %s", self.opts.job, to_json_shape(resume))
        initial = self.enumerator.initial(resume)
        if self.tracker and not resume and not isinstance(self.opts.starting, Earliest):
            self.tracker.pin_start(initial)  # `latest` or a time, resolved once for the job's whole life
        return to_json_shape(initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.enumerator.prepare_available_now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadAllAvailable):
            max_rows = min_rows = None
        else:
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
        end = self.enumerator.next_end(from_json_shape(start), max_rows, min_rows)
        behind = offsets_behind(end, self.enumerator.latest_seen)
        log.info("next batch ends at %s; %s", to_json_shape(end), behind)
        return to_json_shape(end)

    def reportLatestOffset(self) -> dict | None:
        return to_json_shape(self.enumerator.latest_seen) if self.enumerator.latest_seen else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_json_shape(start)
        plan = _recording_loss(self.tracker, lambda: self.enumerator.plan(begin, from_json_shape(end)))
        if self.tracker is not None:
            # a replayed batch finds its own record; a checkpoint of another job is refused
            self.tracker.record(plan, start=begin, from_checkpoint=not self._fresh)
        failpoints.hit("source.planned")
        return _tasks(self.opts, plan.ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def stop(self) -> None:
        """The query stopped: the job is free for its next launch."""
        if self._tracker is not None:
            self._tracker.release()

    def commit(self, end: dict) -> None:
        """Spark finished the batch ending at `end`; commits it in offsets_db when the sink did not."""
        if self.tracker is not None:
            self.tracker.committed_by_spark(from_json_shape(end))

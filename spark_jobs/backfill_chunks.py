"""A backfill's chunks written on threads of the driver, two at a time, each committed as a batch of its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager

from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.connectors.spark import activate_session
from streamfill.errors import StreamfillError
from streamfill.offsets_db.fencing import Lease
from streamfill.offsets_db.store import OffsetStore
from streamfill.partitions import TopicPartition, to_json_shape
from streamfill.spark_jobs.backfill_args import BackfillArgs
from streamfill.spark_jobs.backfill_plan import next_chunk, progress, remaining
from streamfill.spark_jobs.backfill_prepare import Prepared
from streamfill.spark_jobs.entry_sink import sink_options
from streamfill.spark_jobs.kafka_read import kafka_reader, rows_of
from streamfill.spark_jobs.lineage_io import lineage_io
from streamfill.spark_jobs.run_record import recorded_run

IN_FLIGHT = 2  # chunks written at once: one is planned or commits while the other's tasks run


def write_chunks(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str, store: OffsetStore, lease: Lease,
                 prep: Prepared, on_progress: Callable[[int, int], None] | None) -> dict[TopicPartition, int]:
    """Every chunk written and committed as a batch of its own; returns where the job stands.

    Two chunks are in flight at once, on partitions they do not share, each reading half the task slots' worth
    of partitions (those with the most left) in one task each: while one chunk is planned and recorded or
    commits, the other's tasks run, and the next chunk is started as
    soon as one ends. Each write names its chunk's ends, so each commit takes its own batch, in either order. A
    chunk that nothing can run beside is split over every slot. After a failure no chunk starts; the one still in
    flight ends (committed or not) before the failure is raised."""
    window, total = prep.window, prep.window.total
    cores = spark.sparkContext.defaultParallelism  # tasks Spark runs at once
    width = max(1, cores // IN_FLIGHT)  # shared by the chunks in flight: a chunk reads this many partitions or more
    planned = dict(prep.done)  # where each partition stands once every chunk started so far has committed
    flying: dict[Future, dict[TopicPartition, tuple[int, int]]] = {}
    failure: BaseException | None = None
    io = lineage_io(args.spec, [args.topic], kafka, url, args.table)
    with _no_whole_stage_codegen(spark), recorded_run(store, args.job, spark.sparkContext.applicationId, lease, io), \
            ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="streamfill-chunk") as pool:
        while True:
            while failure is None and len(flying) < IN_FLIGHT:
                busy = {tp for chunk in flying.values() for tp in chunk}
                chunk = next_chunk(window, planned, args.chunk_size, width, busy)
                if not chunk:
                    break
                planned.update({tp: e for tp, (_, e) in chunk.items()})
                # a chunk no other can run beside (one partition left, say) is split over every core
                alone = not flying and not next_chunk(window, planned, args.chunk_size, width, set(chunk))
                flying[pool.submit(_write_chunk, spark, args, chunk, cores if alone else width, kafka, url,
                                   lease.generation)] = chunk
            if not flying:
                break
            finished, _ = wait(flying, return_when=FIRST_COMPLETED)
            for future in finished:
                chunk = flying.pop(future)
                try:
                    future.result()
                except BaseException as exc:  # kept, and raised once the other chunk in flight has ended
                    failure = failure or exc
                    continue
                done = progress(window, store.snapshot(args.job))
                if any(done[tp] < e for tp, (_, e) in chunk.items()):
                    ends = to_json_shape({tp: e for tp, (_, e) in chunk.items()})
                    failure = failure or StreamfillError(
                        f"chunk ending at {ends} of job {args.job!r} was written but offsets_db does not show it "
                        "committed; re-run the backfill to continue")
                elif on_progress:
                    on_progress(total - remaining(window, done), total)
        if failure is not None:
            raise failure  # inside the run's record: the run ends failed
    return progress(window, store.snapshot(args.job))


@contextmanager
def _no_whole_stage_codegen(spark) -> Iterator[None]:
    """A chunk's stage (read, a pipeline's parse and checks, the hand-over to the sink) is too large to be fused
    into one method the JVM compiles (spark.sql.codegen.hugeMethodLimit): Spark would generate the fused code for
    every chunk only to find it too large and run the operators' own code. Without whole-stage codegen a chunk
    skips that attempt."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _write_chunk(spark, args: BackfillArgs, chunk: dict[TopicPartition, tuple[int, int]], tasks: int,
                 kafka: Mapping[str, str], url: str, generation: int) -> None:
    """One chunk in at least `tasks` tasks: its read, the entry's parse and the write whose commit takes the
    chunk's batch."""
    activate_session(spark)  # this thread is a new one in the JVM, without an active session
    frame = rows_of(args.spec, _read_chunk(spark, args, kafka, url, chunk, generation, tasks))
    ends = {tp: e for tp, (_, e) in chunk.items()}
    (frame.write.format("streamfill_postgres")
     .options(**sink_options(args.spec, args.job, args.table, args.mode, url, generation, ends))
     .mode("append").save())


def _read_chunk(spark, args: BackfillArgs, kafka: Mapping[str, str], url: str,
                chunk: dict[TopicPartition, tuple[int, int]], generation: int, tasks: int):
    """One chunk's read, by the launch holding the job (`generation`), in at least `tasks` tasks."""
    return (kafka_reader(spark.read, args.spec, args.job, kafka, url, generation)
            .option(kafka_source.ASSIGN.key, json.dumps({args.topic: sorted(tp.partition for tp in chunk)}))
            .option(kafka_source.STARTING_OFFSETS.key,
                    json.dumps(to_json_shape({tp: s for tp, (s, _) in chunk.items()})))
            .option(kafka_source.ENDING_OFFSETS.key, json.dumps(to_json_shape({tp: e for tp, (_, e) in chunk.items()})))
            .option(kafka_source.MIN_PARTITIONS.key, str(tasks))
            .load())

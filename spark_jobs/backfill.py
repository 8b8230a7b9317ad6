"""A bounded, resumable, idempotent reprocessing of a Kafka range into Postgres (`streamfill backfill`).

The range is resolved and recorded in offsets_db (the job's config) before anything is read. Each chunk is one
`spark.read` of `streamfill_kafka` with the job option and one `streamfill_postgres` write, so each chunk is
committed exactly-once together with the job's snapshot. Re-run with the same arguments, the job continues
from its last committed chunk; after it finished, `append-new` has nothing to do and `replace` starts a new
pass that rewrites the same rows.

    spark-submit spark_jobs/backfill.py --job J --topic T --from earliest --to latest --table events_backfill
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.postgres.sink_options import APPEND_NEW, MODES
from streamfill.offsets_db.fencing import Lease
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK, Window, next_chunk, parse_spec, progress, remaining, resolve_window
from streamfill.spark_jobs.runs import (
    NamesAnEntry,
    console,
    entry_of,
    err,
    fail,
    job_session,
    kafka_options,
    reader_options,
    lineage_io,
    recorded_run,
    rows_of,
    say_where,
    sink_options,
    submit_main,
    unreachable,
    wait_seconds,
)
from streamfill.spark_jobs.telemetry import exporters, job_metrics
from streamfill.errors import OptionError, StreamfillError, first_lines
from streamfill.names import default_table, parse_table, validate_job_name
from streamfill.partitions import TopicPartition, to_json_shape
from streamfill.settings import get_settings

IN_FLIGHT = 2  # chunks written at once: one is planned or commits while the other's tasks run


@dataclass(frozen=True)
class BackfillArgs(NamesAnEntry):
    """A backfill's arguments, checked when made (before anything is read or recorded)."""

    job: str
    topic: str
    from_: str
    to: str
    table: str
    mode: str = APPEND_NEW
    chunk_size: int = DEFAULT_CHUNK
    pipeline: str | None = None  # the jobs file's entry that parses the topic; None: the entry named like the job
    wait_for_job: str = "0"  # how long to wait for another launch holding the job; 0 refuses at once

    DERIVED = ("table", "topic")  # from the job and its entry when not given

    def __post_init__(self) -> None:
        validate_job_name(self.job, "--job")
        if not self.topic:
            raise OptionError("--topic", self.topic, "is needed: a backfill reads one topic", "give --topic NAME")
        parse_table(self.table, "--table")
        if self.chunk_size < 1:
            raise OptionError("--chunk-size", self.chunk_size, "must be at least 1", "give offsets per chunk, "
                              f"e.g. {DEFAULT_CHUNK}")
        if self.mode not in MODES:
            raise OptionError("--mode", self.mode, "is not a mode",
                              "use append-new (keep existing rows) or replace (upsert)")
        wait_seconds(self.wait_for_job)
        self.entry  # noqa: B018 - the entry must exist

    @classmethod
    def from_flags(cls, *, job: str, topic: str | None = None, from_: str, to: str, table: str | None = None,
                   mode: str | None = None, pipeline: str | None = None, **flags) -> BackfillArgs:
        """With --job naming an entry and no --topic, the entry's topic, table and mode, under a job of its own
        (`NAME.backfill.<hash of from, to, table>`: a stream's name is its stream's). Otherwise --topic and
        --pipeline (the entry whose columns parse the topic) are needed; the table defaults to the job name
        with - and . turned into _."""
        validate_job_name(job, "--job")
        if topic is None:
            spec = entry_of(job, pipeline)
            if spec.topic is None:
                raise OptionError("--topic", None, f"is needed: entry {spec.name!r} reads several topics "
                                  f"({spec.topics_option[1]}) and a backfill reads one",
                                  "give --topic with one of them")
            table = table or spec.table
            name = job if pipeline else backfill_job(spec.name, from_, to, table)
            return cls(job=name, topic=spec.topic, from_=from_, to=to, table=table, mode=mode or spec.mode,
                       pipeline=spec.name, **flags)
        return cls(job=job, topic=topic, from_=from_, to=to, table=table or default_table(job),
                   mode=mode or APPEND_NEW, pipeline=pipeline, **flags)

    def recorded(self) -> dict[str, str]:
        """What makes two launches the same backfill (the mode may change between passes)."""
        return {"topic": self.topic, "from": self.from_, "to": self.to, "table": self.table}


@dataclass
class Prepared:
    window: Window
    done: dict[TopicPartition, int]
    state: str  # "new", "resuming", "new pass" or "complete"
    config: dict | None = None  # the job's config to record before reading; None: nothing to record
    restart: bool = False  # a new plan: the job starts over from it


@dataclass
class Summary:
    job: str
    state: str
    ranges: dict[str, list[int]]
    offsets: int = 0
    chunks: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    per_partition: dict[str, int] = field(default_factory=dict)


def backfill_job(entry: str, from_: str, to: str, table: str, kind: str = "backfill") -> str:
    """The offsets_db job of a backfill of an entry: the same range into the same table is the same job (a
    re-run continues or changes nothing), another range is another job."""
    digest = hashlib.sha1(f"{from_}|{to}|{table}".encode()).hexdigest()[:10]
    return f"{entry}.{kind}.{digest}"


def check_job(args: BackfillArgs, store: OffsetStore) -> None:
    """A backfill under a stream's name would move the stream's snapshot: refused before anything runs."""
    if store.job_kind(args.job) == "stream":
        raise OptionError("--job", args.job, "is a stream job in offsets_db",
                          f"a backfill needs a name of its own, e.g. {args.job}-backfill")


def resolve(args: BackfillArgs, broker: Broker, now_ms: int | None = None) -> Window:
    """--from/--to to concrete ranges, every check made against the broker before Spark starts."""
    from_spec = parse_spec(args.from_, "--from", args.topic)
    to_spec = parse_spec(args.to, "--to", args.topic)
    topics = broker.readable([args.topic])
    parts = [TopicPartition(args.topic, p) for p in range(topics.get(args.topic, 0))]
    watermarks = broker.watermarks(parts) if parts else {}
    return resolve_window(args.topic, topics.get(args.topic), watermarks, broker.offsets_for_times, from_spec, to_spec,
                          now_ms if now_ms is not None else int(time.time() * 1000), raw_from=args.from_,
                          raw_to=args.to, known_topics=sorted(topics))


def prepare(args: BackfillArgs, broker: Broker, store: OffsetStore) -> Prepared:
    """Decide what this launch does; nothing is read or recorded yet (`record` does that, once every argument,
    the table included, is checked)."""
    prior = store.job_config(args.job).get("backfill")
    snap = store.snapshot(args.job)
    if prior:
        old = Window.from_json(prior["window"])
        old_done = progress(old, snap)
        unfinished = remaining(old, old_done) > 0
        same = {k: prior.get(k) for k in args.recorded()} == args.recorded()
        if same and unfinished:  # the recorded plan, not a new resolution
            return Prepared(old, old_done, "resuming", {"backfill": {**prior, "mode": args.mode}})
        if unfinished:
            raise StreamfillError(
                f"job {args.job!r} has an unfinished backfill of topic {prior['topic']!r} from {prior['from']!r} "
                f"to {prior['to']!r} into {prior['table']!r} ({remaining(old, old_done):,} offsets left). Re-run it "
                "with those arguments to finish it, or give this backfill a new --job name")
    window = resolve(args, broker)
    if prior and window == Window.from_json(prior["window"]) and prior["table"] == args.table \
            and args.mode == APPEND_NEW:
        return Prepared(window, {tp: e for tp, (_, e) in window.bounds.items()}, "complete")
    # a pass's number and the batch before it: what this pass committed, and whether it is a re-run, stay facts
    # of offsets_db (the window's asset event reports them: offsets_db.announcements.newest_pass)
    number = (prior.get("pass", 1) + 1) if prior else 1
    since = store.last_batch_id(args.job) if prior else 0
    return Prepared(window, {tp: s for tp, (s, _) in window.bounds.items()}, "new pass" if prior else "new",
                    {"backfill": {**args.recorded(), "mode": args.mode, "window": window.to_json(),
                                  "pass": number, "since_batch": since}}, restart=True)


def record(args: BackfillArgs, prep: Prepared, store: OffsetStore) -> None:
    """The plan into offsets_db: from here on a re-run with other arguments is refused until this one finishes."""
    if prep.config is not None:
        store.ensure_job(args.job, "backfill", prep.config, restart=prep.restart)


def check_table(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str) -> None:
    """The sink's check of --table on the driver, as the stream does before it records anything: a table that
    does not fit never leaves a plan behind. Nothing is created or added yet: the chunks' writes do that, under
    the launch's hold on the job."""
    from streamfill.connectors.spark.postgres_sink import prepare_table

    prepare_table(sink_options(args.spec, args.job, args.table, args.mode, url),
                  rows_of(args.spec, _kafka(spark, args, kafka, url)).schema, change=False)


def run(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str,
        on_progress: Callable[[int, int], None] | None = None) -> Summary:
    """Process what is left of the plan chunk by chunk; `on_progress(done, total)` after each chunk.

    Every argument and the table are checked first; then the launch takes the job (refused, or waiting with
    --wait-for-job, while another launch holds it), decides again under that hold, and records its plan."""
    from streamfill.connectors.spark import register

    exporters()  # OTEL_METRICS_EXPORTER checked before anything is recorded
    store = OffsetStore(url)
    store.check_grants()
    broker = Broker(kafka)
    started = time.monotonic()
    check_job(args, store)

    def planned() -> tuple[Prepared, Summary]:
        """The plan as offsets_db has it now, with the summary of a launch that finds it complete."""
        prep = prepare(args, broker, store)
        summary = Summary(args.job, prep.state, prep.window.to_json())
        if prep.state == "complete":
            if on_progress:
                on_progress(prep.window.total, prep.window.total)
            summary.seconds = time.monotonic() - started
        return prep, summary

    prep, summary = planned()
    if prep.state == "complete":
        return summary
    register(spark)
    check_table(args, spark, kafka, url)
    store.ensure_job(args.job, "backfill")  # the job must exist to be held; its plan is recorded once held
    with job_metrics(url, args.job, kafka) as metrics:
        def progressed(done: int, total: int) -> None:
            if metrics is not None:
                metrics.observe()
            if on_progress:
                on_progress(done, total)

        with store.hold(args.job, wait_s=wait_seconds(args.wait_for_job), wait_hint="--wait-for-job 10m",
                        on_wait=lambda h: err.print(f"waiting for {h.describe()}", highlight=False)) as lease:
            prep, summary = planned()  # again: another launch may have moved the job while this one waited
            if prep.state == "complete":
                return summary
            window, total = prep.window, prep.window.total
            record(args, prep, store)
            progressed(total - remaining(window, prep.done), total)
            first_batch = store.last_batch_id(args.job)
            with _no_whole_stage_codegen(spark):
                done = _write_chunks(args, spark, kafka, url, store, lease, prep, progressed)
    summary.chunks, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)
    summary.offsets = remaining(window, prep.done) - remaining(window, done)
    summary.seconds = time.monotonic() - started
    return summary


@contextmanager
def _no_whole_stage_codegen(spark) -> Iterator[None]:
    """A chunk's stage (read, a pipeline's parse and checks, the hand-over to the sink) is too large to be fused
    into one method the JVM compiles (spark.sql.codegen.hugeMethodLimit): Spark generated the fused code for every
    chunk, only to find it too large and run the operators' own code. Without whole-stage codegen a chunk skips
    that attempt."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _write_chunks(args: BackfillArgs, spark, kafka: Mapping[str, str], url: str, store: OffsetStore, lease: Lease,
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
    with recorded_run(store, args.job, spark.sparkContext.applicationId, lease, io), \
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
                except BaseException as exc:  # noqa: BLE001 - raised once the other chunk in flight ended
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


def _write_chunk(spark, args: BackfillArgs, chunk: dict[TopicPartition, tuple[int, int]], tasks: int,
                 kafka: Mapping[str, str], url: str, generation: int) -> None:
    """One chunk in at least `tasks` tasks: its read, the entry's parse and the write whose commit takes the
    chunk's batch."""
    # the session is the JVM thread's own (a thread of ours is a new one there): Spark looks the Python data
    # sources up in the active session
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    frame = rows_of(args.spec, _kafka(spark, args, kafka, url, chunk, generation, tasks))
    ends = {tp: e for tp, (_, e) in chunk.items()}
    (frame.write.format("streamfill_postgres")
     .options(**sink_options(args.spec, args.job, args.table, args.mode, url, generation, ends))
     .mode("append").save())


def _kafka(spark, args: BackfillArgs, kafka: Mapping[str, str], url: str,
           chunk: dict[TopicPartition, tuple[int, int]] | None = None, generation: int | None = None,
           tasks: int = 1):
    """One chunk's read, by the launch holding the job (`generation`); without a chunk, only its columns (a
    DataFrame that is never run)."""
    reader = (spark.read.format("streamfill_kafka")
              .options(**kafka_options(kafka))
              .option("includeHeaders", str(args.spec.format == "raw").lower())
              .option("job", args.job).option("offsetsDbUrl", url).options(**reader_options(args.spec)))
    if generation is not None:
        reader = reader.option("jobGeneration", str(generation))
    if chunk is None:
        return reader.option("subscribe", args.topic).load()
    return (reader.option("assign", json.dumps({args.topic: sorted(tp.partition for tp in chunk)}))
            .option("startingOffsets", json.dumps(to_json_shape({tp: s for tp, (s, _) in chunk.items()})))
            .option("endingOffsets", json.dumps(to_json_shape({tp: e for tp, (_, e) in chunk.items()})))
            .option("minPartitions", str(tasks))
            .load())


def launch(args: BackfillArgs, master: str | None = None) -> Summary:
    """The whole launch, as `streamfill backfill` and spark-submit run it: every check against the broker and
    offsets_db before Spark starts, a progress bar, a summary. A failure is one message and exit code 1."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from sqlalchemy.exc import OperationalError

    settings = get_settings()
    try:
        check_job(args, OffsetStore(settings.offsets_db_url))
        resolve(args, Broker(settings.kafka_client()))
    except StreamfillError as exc:
        raise fail(exc) from None
    except OperationalError as exc:
        raise unreachable(settings.offsets_db_url, exc) from None
    spark = job_session(f"streamfill-backfill-{args.job}", master, settings)
    say_where(spark, settings)
    columns = (TextColumn("backfill {task.fields[job]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("offsets, {task.fields[rate]} offsets/s"), TimeRemainingColumn())
    try:
        with Progress(*columns, console=err) as bar:
            task = bar.add_task("backfill", total=None, job=args.job, rate="-")
            first: tuple[float, int] | None = None  # when and where this launch started

            def advance(done: int, total: int) -> None:
                nonlocal first
                first = first or (time.monotonic(), done)
                elapsed = time.monotonic() - first[0]
                rate = f"{(done - first[1]) / elapsed:,.0f}" if elapsed > 0 and done > first[1] else "-"
                bar.update(task, completed=done, total=total, rate=rate)

            summary = run(args, spark, settings.kafka_client(), settings.offsets_db_url, advance)
    except (StreamfillError, ValueError) as exc:
        raise fail(exc) from None
    except (PySparkException, Py4JJavaError) as exc:  # the latter: a Spark error PySpark has no class for
        raise fail(StreamfillError(f"{first_lines(exc)}\nCommitted chunks stay committed; re-run the same command "
                                   "to continue")) from None
    finally:
        spark.stop()
    _print_summary(summary, args.table)
    return summary


def _print_summary(summary: Summary, table_name: str) -> None:
    from rich.table import Table

    if summary.state == "complete":
        console.print(f"backfill {summary.job} already complete: its plan was fully committed before and "
                      "append-new would change nothing (use --mode replace to rewrite)")
    console.print(f"backfill {summary.job} ({summary.state}) into {table_name}:", highlight=False)
    table = Table()
    for col in ("partition", "from", "to", "offsets"):
        table.add_column(col, justify="right")
    for key, (start, end) in summary.ranges.items():
        table.add_row(key, str(start), str(end), f"{end - start:,}")
    console.print(table)
    rate = summary.offsets / summary.seconds if summary.seconds else 0
    console.print(f"{summary.offsets:,} offsets in {summary.chunks} chunks: {summary.rows:,} rows, "
                  f"{summary.dead_letters:,} dead letters, {summary.seconds:.1f} s ({rate:,.0f} offsets/s)")


def main(argv: Sequence[str]) -> int:
    """spark-submit entry point: the same flags as `streamfill backfill`."""
    return submit_main(BackfillArgs, launch, argv, "spark_jobs/backfill.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The long-running stream (`streamfill stream`): Kafka, parse and validate, valid rows and dead letters into
Postgres in one exactly-once batch commit.

Stopping: SIGTERM (or Ctrl-C) to the driver's Python process lets the batch in flight finish, then stops the
query between batches. The job resumes where offsets_db says it stands, with or without its checkpoint.

While it runs, the stream follows its entry (`entry_watch`): a new optional column, a safely widened type or a
column's rules apply between two batches without a restart; a change of what rows are or where they go stops it,
naming the fix; the rest applies at the next launch (`entry_changes`).

    spark-submit spark_jobs/stream.py --job orders --topic orders --table orders_events --trigger 5s
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamfill.connectors.kafka.offsets import parse_start, start_option
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs.entry_watch import EntryWatch
from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.spark_jobs.runs import (
    NamesAnEntry,
    console,
    entry_of,
    fail,
    job_session,
    kafka_options,
    reader_options,
    LineageIO,
    lineage_io,
    recorded_run,
    rows_of,
    say_where,
    sink_options,
    submit_main,
    unreachable,
    wait_seconds,
)
from streamfill.spark_jobs.telemetry import JobMetrics, exporters, job_metrics
from streamfill import durations
from streamfill.durations import stop_grace_seconds
from streamfill.errors import CheckpointMismatch, ForeignCheckpoint, OptionError, StreamfillError
from streamfill.names import parse_table, validate_job_name
from streamfill.settings import STOP_WITH_ENV, get_settings

log = logging.getLogger("streamfill.stream")


@dataclass(frozen=True)
class StreamArgs(NamesAnEntry):
    """A stream's arguments, checked when made (before anything is read or recorded)."""

    job: str
    topic: str | None  # None: the entry's topic, topics or topic_pattern
    table: str
    checkpoint: Path | str  # a local directory, or any Hadoop file system URL Spark reaches (hdfs://, s3a://)
    trigger: str = "5s"
    max_offsets_per_trigger: int | None = None
    start: str | None = None  # while offsets_db has no position for the job; None: the entry's `start`
    pipeline: str | None = None  # the jobs file's entry that parses the topic; None: the entry named like the job
    wait_for_job: str = "0"  # how long to wait for another launch holding the job; 0 refuses at once
    stop_grace: str | None = None  # how long a stop may take to commit the batch in flight; None: the entry's

    DERIVED = ("checkpoint", "topic", "table")  # from the job and its entry when not given

    def __post_init__(self) -> None:
        validate_job_name(self.job, "--job")
        parse_table(self.table, "--table")
        parse_trigger(self.trigger)
        wait_seconds(self.wait_for_job)
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise OptionError("--max-offsets-per-trigger", self.max_offsets_per_trigger, "must be at least 1",
                              "give the most offsets one micro-batch may read, e.g. 100000")
        self.entry  # noqa: B018 - the entry must exist
        if self.start is not None:
            parse_start(self.start, "--start")
        if self.stop_grace is not None:
            stop_grace_seconds(self.stop_grace)

    @property
    def grace_s(self) -> float:
        """--stop-grace, else the entry's stop_grace: how long a stop waits for the batch in flight to commit."""
        return stop_grace_seconds(self.stop_grace or self.entry.stop_grace,
                                  "--stop-grace" if self.stop_grace else "stop_grace")

    @property
    def start_option(self) -> tuple[str, str]:
        """The source option of where the stream starts: --start, else the entry's `start` (earliest by default).
        offsets_db's position for the job, once it has one, wins over either."""
        return start_option(parse_start(self.start or self.entry.start, "--start" if self.start else "start"))

    @property
    def subscription(self) -> tuple[str, str]:
        """The source's subscription option: --topic, else the entry's (entry.topics_option)."""
        return ("subscribe", self.topic) if self.topic else self.spec.topics_option

    @classmethod
    def from_flags(cls, *, job: str, topic: str | None = None, table: str | None = None,
                   checkpoint: str | Path | None = None, trigger: str | None = None,
                   max_offsets_per_trigger: int | None = None, pipeline: str | None = None, **flags) -> StreamArgs:
        """What a flag leaves out comes from the entry (the one named by --pipeline, else by --job): topic, table,
        trigger, max offsets per trigger. `checkpoint` defaults to the entry's checkpoint_dir/JOB, else
        STREAMFILL_HOME/checkpoints/JOB."""
        validate_job_name(job, "--job")
        spec = entry_of(job, pipeline)
        return cls(job=job, topic=topic, table=table or spec.table,
                   checkpoint=_location(checkpoint or _under(spec.checkpoint_dir, job)
                                        or get_settings().home / "checkpoints" / job),
                   trigger=trigger or spec.trigger,
                   max_offsets_per_trigger=(spec.max_offsets_per_trigger if max_offsets_per_trigger is None
                                            else max_offsets_per_trigger),
                   pipeline=pipeline, **flags)


@dataclass
class StreamSummary:
    job: str
    status: str
    batches: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds: float = 0.0


def _under(folder: str | None, job: str) -> str | None:
    return None if folder is None else f"{folder.rstrip('/')}/{job}"


def _location(raw: str | Path) -> Path | str:
    """A checkpoint given as a URL (shared storage: hdfs://, s3a://, abfss://) stays one; anything else is a path."""
    return raw if isinstance(raw, str) and "://" in raw else Path(raw)


def parse_trigger(raw: str) -> dict:
    """`available-now` or an interval such as 500ms, 5s, 2m: DataStreamWriter.trigger's keyword arguments."""
    text = raw.strip().lower()
    if text in ("available-now", "availablenow"):
        return {"availableNow": True}
    found = durations.split(text)
    if not found or found[1] not in ("ms", "s", "m") or found[0] == 0:
        raise OptionError("--trigger", raw, "is not a trigger", "use available-now (read what is there, then stop) "
                          "or an interval such as 5s, 500ms or 1m")
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}[found[1]]
    return {"processingTime": f"{found[0]} {unit}"}


def query_plan(spark, args: StreamArgs, kafka: Mapping[str, str], url: str, generation: int | None = None,
               change: bool = True):
    """The entry's topic(s) through its parse, and the sink's options. The table is created, checked or evolved
    here, so a mismatch is refused before anything is read or recorded; with `change` False only checked (before
    the launch holds its job). `generation` is this launch's hold on the job: its plans and commits carry it."""
    from streamfill.connectors.spark import register
    from streamfill.connectors.spark.postgres_sink import prepare_table

    register(spark)
    spec = args.spec
    reader = (spark.readStream.format("streamfill_kafka")
              .options(**kafka_options(kafka)).option(*args.subscription)
              .option("includeHeaders", str(spec.format == "raw").lower())
              .option(*args.start_option).option("job", args.job).option("offsetsDbUrl", url)
              .options(**reader_options(spec))
              .options(**packing(spark)))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    if spec.commit_to_group:
        reader = reader.option("commitToGroup", spec.commit_to_group)
    if generation is not None:
        reader = reader.option("jobGeneration", str(generation))
    rows = rows_of(spec, reader.load())
    options = sink_options(spec, args.job, args.table, spec.mode, url, generation)
    prepare_table(options, rows.schema, change)
    return rows, options


def packing(spark) -> dict[str, str]:
    """On a local master, one task per core reads a micro-batch (maxPartitions), so a small batch pays a task's
    start-up once per core instead of once per partition. A cluster's cores are not known when the query starts
    (executors come and go), so there each Kafka partition keeps its own task, as in Spark's Kafka source."""
    context = spark.sparkContext
    return {"maxPartitions": str(context.defaultParallelism)} if context.master.startswith("local") else {}


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
    Broker(kafka).readable([t for t in topics.split(",") if t] if kind == "subscribe" else [])


def run(args: StreamArgs, spark, kafka: Mapping[str, str], url: str, stop: threading.Event,
        on_batch: Callable[[dict], None] | None = None) -> StreamSummary:
    """Run until the query ends (AvailableNow) or `stop` is set; then stop between batches.

    Everything is checked first (the cluster's login and the topics' ACLs, then the table); then the launch
    takes the job (refused, or waiting with --wait-for-job, while another launch holds it) and holds it until
    the query has stopped. The table is created, given new columns or widened only under that hold."""
    exporters()  # OTEL_METRICS_EXPORTER checked before anything is recorded
    check_access(args, kafka)
    query_plan(spark, args, kafka, url, change=False)
    store = OffsetStore(url)
    store.ensure_job(args.job, "stream")
    started = time.monotonic()
    summary = StreamSummary(args.job, "succeeded")
    with job_metrics(url, args.job, kafka) as metrics:
        _run_held(args, spark, kafka, url, stop, on_batch, store, summary, metrics)
    summary.seconds = time.monotonic() - started
    return summary


def _run_held(args: StreamArgs, spark, kafka: Mapping[str, str], url: str, stop: threading.Event,
              on_batch: Callable[[dict], None] | None, store: OffsetStore, summary: StreamSummary,
              metrics: JobMetrics | None) -> None:
    """The launch once checked: it takes the job, runs the query until it ends or `stop`, then fills the
    summary's totals. Meanwhile it follows its entry (`entry_watch`): a change it follows stops the query between
    batches, changes the table under the launch's hold and starts the query again from the same checkpoint, so the
    next batch starts where the last committed one ended; a change it refuses stops it between batches and fails the
    launch, nothing of the new entry written."""
    from pyspark.errors import StreamingQueryException

    with store.hold(args.job, wait_s=wait_seconds(args.wait_for_job), wait_hint="--wait-for-job 10m",
                    on_wait=lambda h: console.print(f"waiting for {h.describe()}", highlight=False)) as lease, \
            recorded_run(store, args.job, spark.sparkContext.applicationId, lease,
                         _lineage(args, kafka, url)) as run_row:
        first_batch = store.last_batch_id(args.job)
        running = args  # what the query runs: the launch's arguments, with the entry changes followed since
        query = start(spark, running, kafka, url, query_plan(spark, running, kafka, url, lease.generation))
        watch = EntryWatch(args.job, args.pipeline, args.table, args.entry, args.spec,
                           say=lambda message: console.print(message, highlight=False, markup=False))
        seen, newest, set_aside = -1, None, None

        def report() -> None:
            """One call per micro-batch that ran, in order. lastProgress alone misses a batch that ended between
            two looks, and an idle trigger reports the next batch's id; so once it changes, the batches that ran
            (with an addBatch time) are taken from recentProgress, the last 100."""
            nonlocal seen, newest
            last = query.lastProgress if on_batch or metrics else None
            if last is None or last["timestamp"] == newest:
                return
            newest = last["timestamp"]
            if metrics is not None:
                metrics.observe()
            for progress in query.recentProgress:
                if progress["batchId"] > seen and "addBatch" in progress["durationMs"]:
                    seen = progress["batchId"]
                    if on_batch:
                        on_batch(progress)

        while True:
            changes = None
            try:
                while query.isActive:
                    report()
                    if stop.is_set():
                        _stop_between_batches(query, args.grace_s)
                        run_row.status = summary.status = "stopped"
                        break
                    changes = watch.check()
                    if changes is not None:
                        _stop_between_batches(query, args.grace_s)
                        break
                    try:
                        query.awaitTermination(0.5)
                    except StreamingQueryException:
                        break  # the failure is the query's exception(), below
            except KeyboardInterrupt:
                _stop_between_batches(query, args.grace_s)
                raise
            report()
            failure = query.exception()
            if failure is None and changes is not None:
                if changes.refused:
                    raise changes.error()
                running = _running(args, changes.spec)
                plan = query_plan(spark, running, kafka, url, lease.generation)  # the table changes here
                watch.adopt(changes.spec)
                console.print(f"stream {args.job}: its entry changed ({'; '.join(changes.followed)}); applied "
                              "between two batches, without a restart", highlight=False)
                query = start(spark, running, kafka, url, plan)
                continue
            refused = _refused_checkpoint(failure) if set_aside is None else None
            if refused is None:
                break
            # planning refused the checkpoint before anything of that batch was read or recorded: offsets_db is the
            # truth, and the stream goes on from there with a checkpoint of its own
            set_aside = _set_aside(spark, args.checkpoint, refused)
            console.print(f"stream {args.job}: its checkpoint disagreed with offsets_db; set aside as {set_aside}, "
                          "resuming where offsets_db says", highlight=False)
            query = start(spark, running, kafka, url, query_plan(spark, running, kafka, url, lease.generation))
        if failure is not None:
            raise StreamfillError(f"stream {args.job!r} failed: {_described(failure)}") from None
    summary.batches, summary.rows, summary.dead_letters = store.batch_totals(args.job, first_batch)


def _running(args: StreamArgs, spec: PipelineSpec) -> StreamArgs:
    """`args` running `spec` (`args.spec`), the entry a running stream follows. `args.entry` stays the entry the
    launch read, so what the stream does not follow (its start, its stop grace) stays as it was."""
    following = copy.copy(args)
    following.__dict__["spec"] = spec  # the cached_property's value: set, where reading it would read the file
    return following


REFUSED_CHECKPOINT = tuple(f"{cls.__module__}.{cls.__name__}" for cls in (CheckpointMismatch, ForeignCheckpoint))


def _refused_checkpoint(failure) -> str | None:
    """The line of a query's failure saying that planning refused its checkpoint (a stale copy, another job's);
    None for any other failure, or none."""
    if failure is None:
        return None
    lines = _described(failure).splitlines()
    return next((line for line in lines if any(name in line for name in REFUSED_CHECKPOINT)), None)


def _described(failure) -> str:
    """A query's failure as Spark describes it (the Python traceback of a data source's error included), without
    the JVM's stack trace."""
    return str(failure).split("\n\nJVM stacktrace:", 1)[0]


def _set_aside(spark, checkpoint: Path | str, why: str) -> str:
    """Rename the checkpoint beside itself (any file system Spark's Hadoop configuration reaches), logging what
    it held against offsets_db; returns the new location."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(str(checkpoint))
    target = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}.set-aside-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if not path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).rename(path, target):
        raise StreamfillError(f"{why}. Setting the checkpoint {checkpoint} aside failed: move it away and restart")
    log.warning("%s; the checkpoint is set aside as %s and the stream resumes from offsets_db", why, target)
    return target.toString()


def _lineage(args: StreamArgs, kafka: Mapping[str, str], url: str) -> LineageIO:
    kind, value = args.subscription
    return lineage_io(args.spec, value.split(",") if kind == "subscribe" else [value], kafka, url, args.table,
                      "STREAMING")


def _stop_between_batches(query, timeout_s: float = 600) -> None:
    """Wait for the trigger in flight to finish (its commit included), then stop before the next one."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def graceful_stop(stop: threading.Event, grace_s: float, job: str) -> Callable[[str], None]:
    """What stops a launch: the query ends between batches (the batch in flight commits); once `grace_s` has
    passed the launch kills itself and its JVM (`_end_launch`), cutting that batch, nothing of which commits (its
    commit is one transaction) and which the next launch reads again."""
    began = threading.Event()

    def begin(why: str) -> None:
        stop.set()
        if began.is_set():
            return
        began.set()
        console.print(f"stream {job}: {why}; stopping after the batch in flight commits (within {grace_s:g} s)",
                      highlight=False)

        def cut() -> None:
            time.sleep(grace_s)
            console.print(f"stream {job}: the batch in flight did not commit within {grace_s:g} s of the stop; it "
                          "is cut, nothing of it commits, and the next launch reads it again", highlight=False)
            sys.stdout.flush()
            _end_launch()

        threading.Thread(target=cut, name="streamfill-stop-grace", daemon=True).start()

    return begin


def _end_launch() -> None:
    """Kill this launch at once. Started by an Airflow task, the launch has a process group of its own (spark-submit's
    JVM, this driver, its Python workers); started from a shell, the group is the shell's job, which may hold other
    processes: then only the JVM this driver started, and this process."""
    if os.environ.get(STOP_WITH_ENV):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass
    os._exit(137)


def watch_task(pid: str | None, stopping: Callable[[str], None], every_s: float = 1.0) -> None:
    """Stop the launch when the Airflow task that started it is gone (Airflow's supervisor SIGKILLs a task 5 s
    after SIGTERM; the job, in a process group of its own, outlives it to commit its batch in flight)."""
    if not pid:
        return

    def watch() -> None:
        while True:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                stopping(f"its Airflow task (pid {pid}) ended")
                return
            except PermissionError:
                pass  # alive, another user's
            time.sleep(every_s)

    threading.Thread(target=watch, name="streamfill-task-watch", daemon=True).start()


def launch(args: StreamArgs, master: str | None = None) -> StreamSummary:
    """The whole launch, as `streamfill stream` and spark-submit run it: a session, SIGTERM (or the end of the
    Airflow task that started it) to stop between batches within the stop grace, a line per micro-batch and a
    summary. A failure is one message and exit code 1."""

    from sqlalchemy.exc import OperationalError

    settings = get_settings()
    stop = threading.Event()
    stopping = graceful_stop(stop, args.grace_s, args.job)
    signal.signal(signal.SIGTERM, lambda *_: stopping("SIGTERM"))
    watch_task(os.environ.get(STOP_WITH_ENV), stopping)
    spark = job_session(f"streamfill-stream-{args.job}", master, settings)
    say_where(spark, settings)

    def show(p: dict) -> None:
        sink = p.get("sink", {}).get("numOutputRows", -1)
        console.print(f"batch {p['batchId']}: {p['numInputRows']:,} records read"
                      + (f", {sink:,} rows out" if sink >= 0 else "")
                      + f", {p.get('processedRowsPerSecond', 0):,.0f} records/s", highlight=False)

    try:
        summary = run(args, spark, settings.kafka_client(), settings.offsets_db_url, stop, show)
    except (StreamfillError, ValueError) as exc:
        raise fail(exc) from None
    except OperationalError as exc:
        raise unreachable(settings.offsets_db_url, exc) from None
    finally:
        spark.stop()
    console.print(f"stream {args.job} {summary.status} after {summary.seconds:.1f} s: {summary.batches} batches "
                  f"committed, {summary.rows:,} rows into {args.table}, {summary.dead_letters:,} dead letters")
    return summary


def main(argv: Sequence[str]) -> int:
    """spark-submit entry point: the same flags as `streamfill stream`."""
    return submit_main(StreamArgs, launch, argv, "spark_jobs/stream.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

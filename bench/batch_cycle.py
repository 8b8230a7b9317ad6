"""Where a micro-batch's time goes: a stream at a steady rate, each batch cut into its steps from Spark's own
records, with its tasks packed one per core (what `streamfill stream` does, maxPartitions) and one per Kafka
partition (what Spark's Kafka source does), side by side, interleaved.

Demo events at --rate per second (bench/paced_producer.py) into a stream with a --trigger trigger on a topic of
4 partitions, --seconds per run, --repeat runs of each way. Spark's progress events give the trigger's steps
(latestOffset: the read's planning; queryPlanning; addBatch; walCommit and commitOffsets: the checkpoint's
offset and commit logs), and Spark's event log splits addBatch into the write's job (from its start to its last
task's end: reading, parsing and staging the rows, a task per core or per partition), what comes before it
(the sink's plan for the batch) and after it (the driver's commit: the rows into the table, the offsets and the
snapshot in one transaction). Medians over the batches that read rows, after the first --settle seconds.
Needs `streamfill stack up`; removes what it made.

    .venv/bin/python bench/batch_cycle.py [--rate 20000] [--trigger 100ms] [--seconds 30] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from cleanup import Leftovers, measured
from rich.console import Console
from rich.table import Table
from shared.freshness_run import quantile
from shared.freshness_ways import streamfill_way
from sqlalchemy import create_engine

console = Console(width=200)
STEPS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


@contextmanager
def tasks_per_partition(spark, one_per_partition: bool):
    """The stream packs a batch's ranges into Spark's default parallelism of tasks; as many as partitions
    restores one task per range."""
    context = type(spark.sparkContext)
    before = context.defaultParallelism
    if one_per_partition:
        context.defaultParallelism = property(lambda self: 4)
    try:
        yield
    finally:
        context.defaultParallelism = before


def jobs_of(event_log: Path) -> dict[int, dict]:
    """Per SQL execution of the event log: its start and end, its jobs' start and end and its tasks."""
    raw = next(p for p in event_log.rglob("events_*"))
    lines = (subprocess.run(["zstd", "-dc", str(raw)], check=True, capture_output=True, text=True).stdout
             if raw.name.endswith(".zstd") else raw.read_text())
    executions: dict[int, dict] = {}
    stage_job: dict[int, int] = {}
    jobs: dict[int, dict] = {}
    for line in lines.splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind.endswith("SQLExecutionStart"):
            executions[event["executionId"]] = {"start": event["time"], "jobs": []}
        elif kind.endswith("SQLExecutionEnd") and event["executionId"] in executions:
            executions[event["executionId"]]["end"] = event["time"]
        elif kind == "SparkListenerJobStart":
            execution = event.get("Properties", {}).get("spark.sql.execution.id")
            jobs[event["Job ID"]] = {"start": event["Submission Time"], "tasks": 0}
            for stage in event["Stage IDs"]:
                stage_job[stage] = event["Job ID"]
            if execution is not None and int(execution) in executions:
                executions[int(execution)]["jobs"].append(jobs[event["Job ID"]])
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stage_job:
            jobs[stage_job[event["Stage ID"]]]["tasks"] += 1
    return {i: e for i, e in executions.items() if "end" in e and e["jobs"] and all("end" in j for j in e["jobs"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--trigger", default="100ms")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    measured(measure, ap.parse_args())


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    from streamfill.spark_jobs.session import spark_session

    work = made.folder(Path(tempfile.mkdtemp(prefix="bench-cycle-")))
    results: dict[str, list] = {"one task per core (maxPartitions)": [], "one task per partition": []}
    for _ in range(args.repeat):
        for label, per_partition in zip(results, (False, True), strict=True):
            events = work / f"events-{len(results[label])}-{per_partition}"
            events.mkdir()
            spark = spark_session("bench-cycle", settings, {
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
                "spark.eventLog.compress": "false"})
            engine = create_engine(settings.offsets_db_url)
            try:
                with tasks_per_partition(spark, per_partition):
                    streamfill_way(spark, settings.bootstrap_servers, settings.offsets_db_url, engine, work, made, 4,
                                   args.trigger, 20_000, 2)  # warm
                    run = streamfill_way(spark, settings.bootstrap_servers, settings.offsets_db_url, engine, work,
                                         made, 4, args.trigger, args.rate, args.seconds + args.settle, args.settle)
            finally:
                spark.stop()
                engine.dispose()
            results[label].append((run, jobs_of(events)))
            console.print(f"{label}: p50 {quantile(run.steady(), 50):.2f} s, p99 {quantile(run.steady(), 99):.2f} s, "
                          f"{run.machine.describe()}", highlight=False)

    table = Table(title=f"a micro-batch at {args.rate:,} events/s, trigger {args.trigger}, 4 partitions: medians "
                        f"in ms over {args.repeat} runs of {args.seconds:.0f} s per way")
    rows = ["freshness p50 s", "freshness p99 s", "rows per batch", "tasks per batch", *STEPS,
            "  addBatch: before the job (the sink's plan)", "  addBatch: the job (read, parse, stage)",
            "  addBatch: after the job (the commit)", "machine"]
    table.add_column("")
    for label in results:
        table.add_column(label, justify="right")
    columns = []
    for runs in results.values():
        progress = [p for run, _ in runs for p in run.batches.progress.values()
                    if p["timestamp"] >= _iso(run.began + run.settle)]
        executions = [e for run, jobs in runs for e in jobs.values()
                      if sum(j["tasks"] for j in e["jobs"]) > 0 and e["start"] >= (run.began + run.settle) * 1000]
        steady = [lag for run, _ in runs for lag in run.steady()]
        columns.append([
            f"{quantile(steady, 50):.2f}", f"{quantile(steady, 99):.2f}", med([p["numInputRows"] for p in progress]),
            med([sum(j["tasks"] for j in e["jobs"]) for e in executions]),
            *(med([p["durationMs"].get(step, 0) for p in progress]) for step in STEPS),
            med([e["jobs"][0]["start"] - e["start"] for e in executions]),
            med([max(j["end"] for j in e["jobs"]) - e["jobs"][0]["start"] for e in executions]),
            med([e["end"] - max(j["end"] for j in e["jobs"]) for e in executions]),
            "; ".join(run.machine.describe() for run, _ in runs)])
    for i, name in enumerate(rows):
        table.add_row(name, *(column[i] for column in columns))
    console.print(table)


def med(values: list[float]) -> str:
    """A column's cell: the median, or - when no batch gave a value."""
    return f"{statistics.median(values):,.0f}" if values else "-"


def _iso(epoch: float) -> str:
    """Spark's progress timestamps are ISO 8601 in UTC with milliseconds; they sort as text."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


if __name__ == "__main__":
    main()

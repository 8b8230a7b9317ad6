"""What a backfill chunk costs: the same backfill in large and in small chunks, CPU by process, same run.

Runs `streamfill backfill` (spark_jobs.backfill.run) of end_to_end.py's topic of demo events in chunks of
--large and of --small offsets, interleaved, after one warm-up run of each (the JVM's JIT compiles Spark's
planning code during the first runs, so the first small-chunk run costs more than later ones). For each run it
reads from /proc the wall time and the CPU seconds of:

  the Spark JVM: its JIT compiler threads, its GC threads, its task threads, and the rest (the threads that plan
      and drive each chunk, including threads that ended during the run);
  Spark's Python workers (the planning calls and the tasks' reads and writes);
  PostgreSQL and Kafka, when they run on this machine (`streamfill stack up`);
  this driver process.

Prints the medians for each chunk size and, for each process, the CPU one more chunk costs: (small - large) /
(chunks of small - chunks of large). Needs `streamfill stack up`. At its end, also when it fails, the run removes
its offsets_db jobs and tables (bench/cleanup.py), and the topic of events unless --keep-topic.

    .venv/bin/python bench/chunk_cost.py [--events 2000000] [--partitions 4] [--large 500000] [--small 50000]
                                         [--repeat 2] [--keep-topic]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from pathlib import Path

from cleanup import Leftovers, measured
from rich.console import Console
from rich.table import Table
from shared.events_topic import add_topic_args, topic_with_events

from streamfill.spark_jobs import backfill

console = Console()
TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("wall", "JVM: JIT compilers", "JVM: GC", "JVM: tasks", "JVM: planning and other", "Python workers",
         "PostgreSQL", "Kafka", "driver Python")


def _stat(pid: int | str, task: str | None = None) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a process or one of its threads; None once it is gone."""
    path = Path("/proc") / str(pid) / ("task/" + task if task else "") / "stat"
    try:
        raw = path.read_text()
    except OSError:
        return None
    return raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()


def _cpu(fields: list[str], children: bool) -> float:
    """utime + stime (fields 14 and 15 of stat), with the reaped children's (16 and 17) when asked."""
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / TICK


def _thread_kind(comm: str) -> str:
    if comm.startswith(("C1 Compiler", "C2 Compiler")):
        return "JVM: JIT compilers"
    if comm.startswith(("GC Thread", "G1 ")):
        return "JVM: GC"
    if comm.startswith("Executor task"):
        return "JVM: tasks"
    return "JVM: planning and other"


class Cpu:
    """CPU seconds so far of each kind of process; the JVM is this process's Java child."""

    def __init__(self) -> None:
        me = str(os.getpid())
        self.jvm = next((p.name for p in Path("/proc").iterdir() if p.name.isdigit()
                         and (s := _stat(p.name)) and s[0] == "java" and s[1][1] == me), None)
        if self.jvm is None:
            raise SystemExit("no Spark JVM under this process")

    def sample(self) -> dict[str, float]:
        out = dict.fromkeys(KINDS, 0.0)
        out["wall"] = time.monotonic()
        out["driver Python"] = sum(os.times()[:2])
        for task in os.listdir(f"/proc/{self.jvm}/task"):
            if s := _stat(self.jvm, task):
                out[_thread_kind(s[0])] += _cpu(s[1], children=False)
        # what the live threads named above did not use: the other threads, and those that ended
        threads = sum(out[k] for k in KINDS if k.startswith("JVM: ") and k != "JVM: planning and other")
        out["JVM: planning and other"] = _cpu(_stat(self.jvm)[1], children=False) - threads
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or p.name == self.jvm:
                continue
            s = _stat(p.name)
            if s is None:
                continue
            comm, fields = s
            if comm == "postgres":  # the server (its parent is not postgres) counts its backends that ended
                parent = _stat(fields[1])
                out["PostgreSQL"] += _cpu(fields, children=parent is None or parent[0] != comm)
            elif comm == "java" and b"kafka" in _cmdline(p.name):
                out["Kafka"] += _cpu(fields, children=False)
            elif b"pyspark" in _cmdline(p.name) and (fields[1] == self.jvm or b"pyspark" in _cmdline(fields[1])):
                # the daemon, the JVM's child, counts the workers it forked that ended
                out["Python workers"] += _cpu(fields, children=fields[1] == self.jvm)
        return out


def _cmdline(pid: str) -> bytes:
    try:
        return (Path("/proc") / pid / "cmdline").read_bytes()
    except OSError:
        return b""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_topic_args(ap)
    ap.add_argument("--large", type=int, default=500_000, help="the large chunk size (the backfill's default)")
    ap.add_argument("--small", type=int, default=50_000, help="the small chunk size")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs of each size after the warm-up, interleaved")
    args = ap.parse_args()

    measured(measure, args)


def measure(args: argparse.Namespace, settings, made: Leftovers) -> None:
    bootstrap, url = settings.bootstrap_servers, settings.offsets_db_url
    topic = topic_with_events(bootstrap, args.events, args.partitions, made)

    from streamfill.spark_jobs.session import spark_session

    spark = spark_session("bench-chunks", settings, {"spark.ui.enabled": "false",
                                                     "spark.ui.showConsoleProgress": "false"})
    cpu = Cpu()
    runs: dict[int, list[tuple[int, dict[str, float]]]] = {args.large: [], args.small: []}
    try:
        for i in range(args.repeat + 1):
            for size in (args.large, args.small):
                name = made.table(f"bench_chunks_{uuid.uuid4().hex[:8]}")
                run = backfill.BackfillArgs(name.replace("_", "-"), topic, "earliest", "latest", name,
                                            chunk_size=size, pipeline="orders")
                made.job(run.job)
                before = cpu.sample()
                summary = backfill.run(run, spark, settings.kafka_client(), url)
                after = cpu.sample()
                used = {k: after[k] - before[k] for k in KINDS}
                warm = " (warm-up, not counted)" if i == 0 else ""
                console.print(f"chunks of {size:,}: {summary.chunks} chunks, {summary.offsets:,} offsets in "
                              f"{used['wall']:.1f} s{warm}")
                if i:
                    runs[size].append((summary.chunks, used))
    finally:
        spark.stop()

    med = {size: {k: statistics.median(u[k] for _, u in rs) for k in KINDS} for size, rs in runs.items()}
    chunks = {size: statistics.median(n for n, _ in rs) for size, rs in runs.items()}
    extra = chunks[args.small] - chunks[args.large]
    table = Table(title=f"backfill of {args.events:,} events over {args.partitions} partitions "
                        f"in chunks of {args.large:,} and {args.small:,} (median of {args.repeat}, after a warm-up)")
    table.add_column("seconds: wall, then CPU")
    for size in (args.large, args.small):
        table.add_column(f"{size:,} ({chunks[size]:.0f} chunks)", justify="right")
    table.add_column("ms per extra chunk", justify="right")
    for k in KINDS:
        per = (med[args.small][k] - med[args.large][k]) / extra * 1000 if extra else float("nan")
        table.add_row(k, f"{med[args.large][k]:.1f}", f"{med[args.small][k]:.1f}", f"{per:,.0f}")
    cpu_kinds = [k for k in KINDS if k != "wall"]
    total = {size: sum(med[size][k] for k in cpu_kinds) for size in med}
    per_total = (total[args.small] - total[args.large]) / extra * 1000 if extra else float("nan")
    table.add_row("CPU, all of the above", f"{total[args.large]:.1f}", f"{total[args.small]:.1f}",
                  f"{per_total:,.0f}")
    console.print(table)
    console.print(f"small/large throughput = {med[args.large]['wall'] / med[args.small]['wall']:.2f}  "
                  f"(end_to_end.py's d/c, target >= 0.70)")


if __name__ == "__main__":
    main()

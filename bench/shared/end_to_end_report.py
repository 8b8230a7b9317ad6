"""The figures bench/end_to_end.py prints at its end: the table of ways and the ratios against their targets."""

from __future__ import annotations

import argparse
import statistics

from rich.console import Console
from rich.table import Table

console = Console()


def report(args: argparse.Namespace, labels: dict[str, str], timings: dict[str, list[float]],
           contended: dict[str, list[float]], worst: dict[str, float], peaks: dict[str, dict[str, int]],
           same: list[str], deleting_count: int | None) -> None:
    """Offsets per second of each way (median of its timed runs), against (b) and (f); with --contended, its time
    while users held its table; the peak RSS; then the ratios the ways are held to."""
    rate = {k: (deleting_count if k == "g" else args.events) / statistics.median(ts) for k, ts in timings.items()}
    table = Table(title=f"{args.events:,} events, {args.partitions} partitions, batches of {args.batch:,} "
                        f"(median of {args.repeat}, interleaved)")
    columns = ["way", "seconds", "offsets/s", "vs b", "vs f"]
    if args.contended:
        columns += ["seconds, table held by a reader", "probe's worst wait (s)"]
    for col in (*columns, "peak RSS driver JVM / python / workers (MB)"):
        table.add_column(col, justify="left" if col == "way" else "right")
    for k, ts in timings.items():
        mb = peaks[k]
        held = [f"{statistics.median(contended[k]):.1f}", f"{worst[k]:.3f}"] if args.contended else []
        table.add_row(labels[k], f"{statistics.median(ts):.1f}", f"{rate[k]:,.0f}",
                      f"{rate[k] / rate['b']:.2f}" if "b" in rate else "-",
                      f"{rate[k] / rate['f']:.2f}" if "f" in rate else "-", *held,
                      f"{mb['driver JVM'] / 2**20:,.0f} / {mb['driver python'] / 2**20:,.0f} / "
                      f"{mb['python workers'] / 2**20:,.0f}")
    console.print(table)
    if same:
        console.print(f"same rows and dead letters in {', '.join(same)}; parsers: b Spark's from_json and casts "
                      "alone, the others values typed in the read where certain and Spark's from_json for the rest "
                      "(spark_jobs.pipelines.typed_in_read, reader_options)")
    for k, target in (("a", 1.5), ("c", 1.5), ("e", None)):
        if k in rate and "b" in rate:
            console.print(f"{k}/b = {rate[k] / rate['b']:.2f}" + (f"  (target >= {target})" if target else ""))
    if "d" in rate and "c" in rate:
        console.print(f"d/c = {rate['d'] / rate['c']:.2f}  (target >= 0.70)")
    if "g" in rate and "e" in rate:
        console.print(f"g/e = {rate['g'] / rate['e']:.2f}  (offsets per second, upsert with deletes against plain "
                      "upserts)")
    if "f" in rate and "a" in rate:
        console.print(f"a/f = {rate['a'] / rate['f']:.2f}  (aim >= 0.5: the exactly-once path against the raw ceiling)")

"""What a backfill launch tells its user: a progress bar while it runs and a summary of what it committed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from streamfill.console import console, err


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


@contextmanager
def progress_bar(job: str) -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr of the offsets the job has committed, with this launch's rate; gives the
    `on_progress(done, total)` that moves it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("backfill {task.fields[job]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("offsets, {task.fields[rate]} offsets/s"), TimeRemainingColumn())
    with Progress(*columns, console=err) as bar:
        task = bar.add_task("backfill", total=None, job=job, rate="-")
        first: tuple[float, int] | None = None  # when and where this launch started

        def advance(done: int, total: int) -> None:
            nonlocal first
            first = first or (time.monotonic(), done)
            elapsed = time.monotonic() - first[0]
            rate = f"{(done - first[1]) / elapsed:,.0f}" if elapsed > 0 and done > first[1] else "-"
            bar.update(task, completed=done, total=total, rate=rate)

        yield advance


def print_summary(summary: Summary, table_name: str) -> None:
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

"""What bench/widening.py measured, per table and change, and the medians' table it prints at its end."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from shared.widening_sql import CATALOG, CHANGES, REWRITE
from streamfill.connectors.postgres.table_evolution import REWRITE_LIMIT

console = Console()
if not console.is_terminal:
    console.width = 160  # the medians' table is wide; a pipe or a file would get 80 columns

MB = 2**20


@dataclass
class Sample:
    """One ALTER: its seconds, the table's size before it, whether it rewrote the table, the reader's queries."""

    seconds: float  # ACCESS EXCLUSIVE held: from the lock granted to the commit's end
    size: int
    rewrote: bool
    worst: float  # the reader's longest query that overlapped the ALTER
    usual: float | None  # the reader's median query that did not


@dataclass
class Sized:
    """One table of the run and its samples per change, a sample per round."""

    mb: int
    table: str
    rows: int = 0
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {c: [] for c in CHANGES})


def report(tables: list[Sized], repeat: int) -> None:
    med = statistics.median
    table = Table(title=f"ALTER TABLE on a pipeline's table, medians of {repeat} rounds: the rewrite ({REWRITE}), the "
                        "catalog-only changes, and the reader's longest query during them (the slowest of the three "
                        "catalog-only ALTERs of a round), seconds")
    for name in ("MB", "rows", "rewrite s", "MB/s", "reader's worst wait, rewrite s", *(f"{c} s" for c in CATALOG),
                 "reader's worst wait, catalog-only s", "reader's usual query s"):
        table.add_column(name, justify="right")
    points = []
    for sized in tables:
        mb = med(s.size for s in sized.samples[REWRITE]) / MB
        rewrite = med(s.seconds for s in sized.samples[REWRITE])
        points.append((mb, rewrite))
        catalog_worst = med(max(sized.samples[c][r].worst for c in CATALOG) for r in range(repeat))
        usual = [s.usual for c in CHANGES for s in sized.samples[c] if s.usual is not None]
        table.add_row(f"{mb:,.1f}", f"{sized.rows:,}", f"{rewrite:.3f}", f"{mb / rewrite:,.1f}",
                      f"{med(s.worst for s in sized.samples[REWRITE]):.3f}",
                      *(f"{med(s.seconds for s in sized.samples[c]):.4f}" for c in CATALOG),
                      f"{catalog_worst:.3f}", f"{med(usual):.3f}" if usual else "-")
    console.print(table)
    if len({mb for mb, _ in points}) >= 2:
        slope, fixed = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
        limit = REWRITE_LIMIT / MB
        console.print(f"rewrite fitted over the sizes: {fixed:.3f} s + {slope * 1000:.1f} ms per MB; at REWRITE_LIMIT "
                      f"({limit:.0f} MB) about {fixed + slope * limit:.2f} s, every reader of the table waiting that "
                      "long", highlight=False)

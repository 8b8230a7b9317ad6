"""The figures bench/growth.py prints: a level's line, the curve, the calls and endpoints per level, the
verdict against the target and the projection to 10^7 batches."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from commit_overhead import p95
from rich.table import Table

from shared.growth_history import Step

WEEK_S = 7 * 86_400  # the page's longest window, in batches at a 1 s trigger
TARGET = 1.2


@dataclass
class Level:
    synthesized: int
    offsets_rows: int
    window_batches: int
    db_bytes: int
    plan: tuple[list[float], list[float]]  # (main, empty) ms
    commit: tuple[list[float], list[float]]
    hook: tuple[list[float], list[float]]
    page: tuple[dict[str, float], dict[str, float]]

    def ratio(self, what: str) -> float:
        main, empty = getattr(self, what)
        return statistics.median(main) / statistics.median(empty)

    def source(self) -> tuple[float, float]:
        """The source's per-batch offsets_db calls (plan + commit hook), median of the sums: (main, empty)."""
        return tuple(statistics.median(p + h for p, h in zip(*pair, strict=True))  # type: ignore[return-value]
                     for pair in ((self.plan[0], self.hook[0]), (self.plan[1], self.hook[1])))

    def slowest(self) -> tuple[str, float, float]:
        """The page's slowest endpoint on the history: (endpoint, its median, its median on the empty side)."""
        what = max(self.page[0], key=self.page[0].get)
        return what, self.page[0][what], self.page[1][what]


def level_line(level: Level) -> str:
    commit, empty = (statistics.median(x) for x in level.commit)
    src, src_empty = level.source()
    what, page, page_empty = level.slowest()
    return (f"[bold]{level.synthesized:,}[/] batches: commit {commit:.1f} ms (empty {empty:.1f}, "
            f"x{commit / empty:.2f}); source plan + hook {src:.1f} ms (x{src / src_empty:.2f}); page's slowest "
            f"{what} {page:,.0f} ms (empty {page_empty:,.0f}, x{page / page_empty:.1f})")


def curve(levels: list[Level], repeat: int) -> Table:
    table = Table(title=f"offsets_db history vs an empty offsets_db (side by side, median of {repeat}; "
                        "x = ratio to the empty side)")
    for col in ("level (batches)", "batch_offsets rows", "db GB", "in 7d window", "commit ms", "commit p95",
                "x", "plan + hook ms", "x", "slowest page endpoint", "ms", "x", "x prev"):
        table.add_column(col, justify="left" if col == "slowest page endpoint" else "right")
    previous: Level | None = None
    for lv in levels:
        commit, commit_empty = lv.commit
        src, src_empty = lv.source()
        what, page, page_empty = lv.slowest()
        before = previous.page[0][what] if previous is not None else None
        table.add_row(f"{lv.synthesized:,}", f"{lv.offsets_rows:,}", f"{lv.db_bytes / 1e9:.2f}",
                      f"{lv.window_batches:,}", f"{statistics.median(commit):.1f}", f"{p95(commit):.1f}",
                      mark(statistics.median(commit) / statistics.median(commit_empty)), f"{src:.1f}",
                      mark(src / src_empty), what, f"{page:,.0f}", mark(page / page_empty),
                      f"{page / before:.2f}" if before else "")
        previous = lv
    return table


def mark(ratio: float) -> str:
    return f"[red]{ratio:.2f}[/]" if ratio > TARGET else f"{ratio:.2f}"


def per_endpoint(levels: list[Level]) -> Table:
    table = Table(title="the page per endpoint, median ms on the history (the empty side's in brackets)")
    table.add_column("endpoint")
    for lv in levels:
        table.add_column(f"{lv.synthesized:,}", justify="right")
    for what in levels[0].page[0]:
        table.add_row(what, *(f"{lv.page[0][what]:,.0f} ({lv.page[1][what]:,.0f})" for lv in levels))
    return table


def per_call(levels: list[Level]) -> Table:
    table = Table(title="the micro-batch's offsets_db calls, median / p95 ms on the history (x = ratio to empty)")
    table.add_column("call")
    for lv in levels:
        table.add_column(f"{lv.synthesized:,}", justify="right")
    for what, name in (("plan", "source: record the plan"), ("commit", "sink: driver commit"),
                       ("hook", "source: commit hook")):
        table.add_row(name, *(f"{statistics.median(getattr(lv, what)[0]):.1f} / {p95(getattr(lv, what)[0]):.1f} "
                              f"(x{lv.ratio(what):.2f})" for lv in levels))
    return table


def verdict(levels: list[Level]) -> str:
    top = levels[-1]
    what, page, page_empty = top.slowest()
    src, src_empty = top.source()
    checks = {"commit": top.ratio("commit"), "plan + hook": src / src_empty, f"page ({what})": page / page_empty}
    parts = [f"{name} x{r:.2f} {'within' if r <= TARGET else 'NOT within'}" for name, r in checks.items()]
    line = f"at {top.synthesized:,} batches, against an empty offsets_db (target {TARGET}x): " + "; ".join(parts)
    full = [lv for lv in levels if lv.synthesized >= WEEK_S]
    if len(full) >= 2:  # the same windows, more history: the page's own growth with history
        a, b = full[0], full[-1]
        line += (f". With its 7d window full at both, the page's slowest endpoint at {b.synthesized:,} is "
                 f"x{b.page[0][what] / a.page[0][what]:.2f} of {a.synthesized:,}")
    elif top.window_batches:
        line += (f". The page's windows hold {top.window_batches:,} batches here and none when empty: its ratio "
                 "is its windows' size, not history; 10^6 against 10^7 (7d window full at both) tells history")
    return line


def projection(steps: list[Step], max_wal: str) -> str:
    """Time and disk of a run to 10^7 batches, from the largest step measured (synthesis is set-based and
    append-only: it grows about linearly)."""
    step = max(steps, key=lambda s: s.batches)
    rate, per_batch = step.batches / step.seconds, step.bytes_added / step.batches
    total = 10_000_000
    return (f"projection to {total:,} batches from the step of {step.batches:,} ({rate:,.0f} batches/s with "
            f"its VACUUM, {per_batch:,.0f} bytes per batch): synthesis about {total / rate / 60:,.0f} min, the "
            f"database about {total * per_batch / 1e9:,.1f} GB (plus WAL up to max_wal_size {max_wal} while it "
            f"writes)")

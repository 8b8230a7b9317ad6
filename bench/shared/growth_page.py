"""The streamfill page in bench/growth.py: its endpoints timed in-process on both databases, its clock pinned to
the history's last second."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from ui_queries import endpoints

from shared.growth_history import TOPICS


@contextmanager
def page_clock(at: datetime | None) -> Iterator[None]:
    """The page's `now` pinned to `at` (None: the real clock). The page reads its clock in data.py only; its
    windows are `now` minus 1h, 24h or 7d."""
    from streamfill.orchestration.ui import data

    if at is None:
        yield
        return

    class Pinned(datetime):
        @classmethod
        def now(cls, tz=None):
            return at if tz is None else at.astimezone(tz)

    real, data.datetime = data.datetime, Pinned
    try:
        yield
    finally:
        data.datetime = real


def page_paths(probe: int) -> list[tuple[str, str]]:
    """ui_queries' endpoints; its offset finder asks for one of this history's topics and an offset it holds."""
    out = []
    for what, path in endpoints(0):
        if "/find?" in path:
            path = path.split("?")[0] + f"?topic={TOPICS[0]}&partition=0&offset={probe}"
        out.append((what, path))
    return out


def measure_page(client, sides: list[tuple[str, datetime | None]], paths: list[tuple[str, str]],
                 repeat: int) -> dict[str, dict[str, float]]:
    """Median ms per endpoint per side ({side url: {endpoint: ms}}): every endpoint warmed once per side, then
    --repeat rounds, each round both sides one after the other (alternating which goes first)."""
    from streamfill.orchestration.ui import db

    def get(path: str) -> float:
        started = time.perf_counter()
        resp = client.get(path)
        spent = (time.perf_counter() - started) * 1000
        if resp.status_code != 200:
            raise SystemExit(f"{path} answered {resp.status_code}: {resp.text[:500]}")
        return spent

    times: dict[str, dict[str, list[float]]] = {url: {what: [] for what, _ in paths} for url, _ in sides}
    for url, clock in sides:
        db.use(url)
        with page_clock(clock):
            for _, path in paths:  # the pool's connection, the templates' compile
                get(path)
    for i in range(repeat):
        for url, clock in (sides if i % 2 else sides[::-1]):
            db.use(url)  # a new engine: its first request opens the connection and checks the revision
            with page_clock(clock):
                get(paths[0][1])
                for what, path in paths:
                    times[url][what].append(get(path))
    return {url: {what: statistics.median(ts) for what, ts in per.items()} for url, per in times.items()}

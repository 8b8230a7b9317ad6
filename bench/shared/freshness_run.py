"""What a freshness run observes: when each offset became visible in the table, the machine's load, the
micro-batches Spark ran, and the lags they add up to."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LOOK_S = 0.05


class Watcher(threading.Thread):
    """Every LOOK_S, per partition, the highest offset visible in the table, with the wall-clock time."""

    def __init__(self, url: str, table: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.topic, self.partitions = url, table, topic, partitions
        self.stop = threading.Event()
        self.seen: dict[int, tuple[list[float], list[int]]] = {p: ([], []) for p in range(partitions)}

    def run(self) -> None:
        import psycopg2

        from streamfill.connectors.postgres.connection import dsn

        conn = psycopg2.connect(dsn(self.url))
        conn.autocommit = True
        query = (f'SELECT p, (SELECT max("offset") FROM "{self.table}" WHERE topic = %s AND partition = p) '
                 "FROM generate_series(0, %s) p")
        try:
            with conn.cursor() as cur:
                while not self.stop.wait(LOOK_S):
                    cur.execute(query, (self.topic, self.partitions - 1))
                    now = time.time()
                    for p, top in cur.fetchall():
                        times, offsets = self.seen[p]
                        if top is not None and (not offsets or top > offsets[-1]):
                            times.append(now)
                            offsets.append(top)
        finally:
            conn.close()

    def visible_at(self, partition: int, offset: int) -> float | None:
        import bisect

        times, offsets = self.seen[partition]
        i = bisect.bisect_left(offsets, offset)
        return times[i] if i < len(offsets) else None


class Machine:
    """CPU busy and stolen (from /proc/stat) and the 1-minute load average over a stretch of time."""

    def __enter__(self) -> Machine:
        self.before = self._ticks()
        return self

    def __exit__(self, *exc) -> None:
        after = self._ticks()
        delta = [a - b for a, b in zip(after, self.before, strict=True)]
        total = sum(delta) or 1
        idle = delta[3] + delta[4]
        self.busy, self.steal = (total - idle) / total, delta[7] / total
        self.load = float(Path("/proc/loadavg").read_text().split()[0])

    @staticmethod
    def _ticks() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]

    def describe(self) -> str:
        return f"{self.busy:.0%} busy, {self.steal:.0%} stolen, load {self.load:.1f}"


@dataclass
class Batches:
    """The micro-batches a way ran (Spark's progress events), each once."""

    progress: dict[int, dict] = field(default_factory=dict)

    def add(self, event: dict) -> None:
        if event["numInputRows"] and "addBatch" in event["durationMs"]:
            self.progress[event["batchId"]] = event

    def median(self, key: str) -> float:
        values = [p["durationMs"].get(key, 0) for p in self.progress.values()]
        return statistics.median(values) if values else 0.0

    def slowest(self, key: str) -> float:
        return max((p["durationMs"].get(key, 0) for p in self.progress.values()), default=0.0)

    def rows(self) -> float:
        values = [p["numInputRows"] for p in self.progress.values()]
        return statistics.median(values) if values else 0.0


@dataclass
class Run:
    lags: list[tuple[float, float]]  # (Kafka timestamp, freshness) of every 100th offset
    sent: dict
    batches: Batches
    machine: Machine
    began: float  # when the producer started (wall clock)
    settle: float

    def steady(self) -> list[float]:
        return [lag for stamp, lag in self.lags if stamp >= self.began + self.settle]

    def last(self, seconds: float = 10) -> list[float]:
        end = max(stamp for stamp, _ in self.lags)
        return [lag for stamp, lag in self.lags if stamp >= end - seconds]


def quantile(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100)[percent - 1] if len(values) > 1 else float("nan")

"""The reader of bench/widening.py: a query of the table in a loop while an ALTER runs, to tell how long the
ALTER held readers."""

from __future__ import annotations

import random
import statistics
import threading
import time

from shared.widening_sql import READ, statement

WARM = 3  # the reader's queries before each ALTER starts


class Reader:
    """`SELECT count(*) FROM t WHERE "offset" = %s` in a loop on a thread and a connection of its own, each query's
    start and end recorded, while the `with` block runs (from WARM queries done to its last query ended)."""

    def __init__(self, conninfo: str, table: str, offsets: int, seed: int) -> None:
        import psycopg2

        self.conn = psycopg2.connect(conninfo, application_name="bench-widening-reader")
        self.conn.autocommit = True
        self.query, self.offsets, self.rng = statement(READ, table), offsets, random.Random(seed)
        self.queries: list[tuple[float, float]] = []
        self.stop, self.started, self.error = threading.Event(), threading.Event(), None

    def __enter__(self) -> Reader:
        self.queries, self.error = [], None
        self.stop.clear()
        self.started.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self.started.wait(60)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._thread.join(300)
        if self.error is not None and exc[0] is None:
            raise self.error

    def _run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    offset = self.rng.randrange(self.offsets)
                    began = time.perf_counter()
                    cur.execute(self.query, (offset,))
                    cur.fetchone()
                    self.queries.append((began, time.perf_counter()))
                    if len(self.queries) >= WARM:
                        self.started.set()
        except Exception as exc:  # whatever it is, __exit__ raises it in the measuring thread
            self.error = exc
            self.started.set()

    def during(self, start: float, end: float) -> tuple[float, float | None]:
        """The longest query that overlapped [start, end] and the median of those that did not."""
        inside = [e - b for b, e in self.queries if b < end and e > start]
        outside = [e - b for b, e in self.queries if not (b < end and e > start)]
        return max(inside, default=0.0), statistics.median(outside) if outside else None

    def close(self) -> None:
        self.conn.close()

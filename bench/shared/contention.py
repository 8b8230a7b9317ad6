"""A contention simulator: users of a table while a benchmark's way writes it, as --contended runs them."""

from __future__ import annotations

import threading
import time


class ContentionSimulator:
    """While a way runs: once its table exists, an analyst's transaction that read it stays open (holding its
    lock on the table) and a dashboard's short query runs every half second. `worst` is that query's longest
    time, lock waits included."""

    def __init__(self, url: str, table_of) -> None:
        self.url, self.table_of = url, table_of
        self.stop, self.worst, self.probes = threading.Event(), 0.0, 0

    def __enter__(self) -> ContentionSimulator:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        import psycopg2

        from streamfill.connectors.postgres.connection import dsn

        analyst, dashboard = psycopg2.connect(dsn(self.url)), psycopg2.connect(dsn(self.url))
        analyst.set_session(isolation_level="REPEATABLE READ")
        dashboard.autocommit = True
        holding = False
        try:
            while not self.stop.wait(0.5):
                table = self.table_of()
                if table is None:
                    continue
                with dashboard.cursor() as cur:
                    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{table}"',))
                    if not cur.fetchone()[0]:
                        continue
                    if not holding:
                        with analyst.cursor() as held:
                            held.execute(f'SELECT 1 FROM "{table}" LIMIT 1')
                        holding = True
                    started = time.perf_counter()
                    cur.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{table}" LIMIT 10) s')
                    cur.fetchone()
                    self.worst = max(self.worst, time.perf_counter() - started)
                    self.probes += 1
        finally:
            analyst.close()
            dashboard.close()

"""An OpenLineage HTTP endpoint for tests: it takes what a job sends to POST /api/v1/lineage, keeps every event and
checks each against the specification's schemas (tests/lineage_schema.py). A job points at it with `.env`."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests import lineage_schema

PATH = "/api/v1/lineage"  # the client's default endpoint under OPENLINEAGE_URL


@dataclass
class Received:
    url: str
    events: list[dict] = field(default_factory=list)
    invalid: list[tuple[object, list[str]]] = field(default_factory=list)  # (event or raw body, its problems)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def env(self) -> dict[str, str]:
        return {"OPENLINEAGE_URL": self.url}

    def add(self, event: object, found: list[str]) -> None:
        with self._changed:
            if isinstance(event, dict):
                self.events.append(event)
            if found:
                self.invalid.append((event, found))
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout: float = 30.0) -> list[dict]:
        """The events once `predicate(events)` holds, woken by each new event; AssertionError naming what came
        when it does not within `timeout` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(list(self.events)), timeout):
                seen = [f"{e.get('eventType')} {e.get('job', {}).get('name')}" for e in self.events]
                raise AssertionError(f"lineage events after {timeout}s: {seen or 'none'}")
            return list(self.events)

    def of_run(self, run_id: str) -> list[dict]:
        with self._changed:
            return [e for e in self.events if e.get("run", {}).get("runId") == run_id]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.split("?", 1)[0].rstrip("/") != PATH:
            self.send_error(404, f"POST lineage events to {PATH}")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        try:
            event = json.loads(body)
        except ValueError as exc:
            self.server.received.add(body.decode(errors="replace"), [f"body is not JSON: {exc}"])
            self.send_error(400, "not JSON")
            return
        self.server.received.add(event, lineage_schema.problems(event))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args) -> None:  # the test's output stays the test's
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    received: Received


@contextmanager
def receiver(host: str = "127.0.0.1") -> Iterator[Received]:
    """A receiver on a free port of `host` for the block's length."""
    server = _Server((host, 0), _Handler)
    server.received = Received(f"http://{host}:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="lineage-receiver", daemon=True)
    thread.start()
    try:
        yield server.received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

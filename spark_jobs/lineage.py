"""Sending streamfill's OpenLineage events (built by `spark_jobs.lineage_events`) with openlineage-python.

The transport is OpenLineage's own configuration: OPENLINEAGE_CONFIG, ./openlineage.yml,
~/.openlineage/openlineage.yml, OPENLINEAGE__TRANSPORT__* or OPENLINEAGE_URL; OPENLINEAGE_DISABLED=true turns it
off. With none of them lineage is off: the client alone would print every event to the console. Lineage never
fails a job: an event that cannot be delivered is one warning line naming the transport and what to do.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from openlineage.client.event_v2 import RunEvent, RunState

from streamfill.errors import OptionError, first_lines
from streamfill.spark_jobs.lineage_events import DEFAULT_NAMESPACE, NAMESPACE_SETTING, Named, Parent, run_event

log = logging.getLogger("streamfill.lineage")

DISABLED, CONFIG, URL = "OPENLINEAGE_DISABLED", "OPENLINEAGE_CONFIG", "OPENLINEAGE_URL"
ENV_TRANSPORT = "OPENLINEAGE__TRANSPORT__"  # the client's settings of its config file, one variable per key
CONFIG_FILE = "openlineage.yml"
FIX = f"check that the lineage server is up and the transport's settings are right, or set {DISABLED}=true"

_lock = threading.Lock()
_client: dict[str, Any] = {}  # key: (pid, transport), client: the process's OpenLineageClient or None
_warned: set[str] = set()


def configured(environ: Mapping[str, str] = os.environ, cwd: Path | None = None,
               home: Path | None = None) -> str | None:
    """Which OpenLineage setting is in force, as a short description (`http transport to http://marquez:5000
    (OPENLINEAGE_URL)`), by the client's own order: a transport type from the config file or the
    OPENLINEAGE__TRANSPORT__* settings (the latter win), then OPENLINEAGE_URL. None: lineage is off."""
    if environ.get(DISABLED, "").strip().lower() == "true":
        return None
    cwd, home = cwd or Path.cwd(), home or Path.home()
    path = _config_file(environ, cwd, home)
    from_file = _transport_of(path) if path else {}
    kind = environ.get(f"{ENV_TRANSPORT}TYPE") or from_file.get("type")
    if kind:
        if str(kind).lower() == "noop":
            return None
        sources = [str(path)] if from_file.get("type") else []
        if any(k.startswith(ENV_TRANSPORT) and not k.startswith(f"{ENV_TRANSPORT}TRANSPORTS__DEFAULT_HTTP__")
               for k in environ):  # DEFAULT_HTTP: the client's own copy of OPENLINEAGE_URL
            sources.append(f"{ENV_TRANSPORT}* settings")
        url = environ.get(f"{ENV_TRANSPORT}URL") or from_file.get("url")
        return f"{kind} transport" + (f" to {_plain(str(url))}" if url else "") + f" ({' and '.join(sources)})"
    if environ.get(URL):
        return f"http transport to {_plain(environ[URL])} ({URL})"
    return None


def _config_file(environ: Mapping[str, str], cwd: Path, home: Path) -> Path | None:
    given = environ.get(CONFIG)
    if given:
        path = cwd / Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.R_OK)):
            raise OptionError(CONFIG, given, "is no readable file",
                              f"point it at an {CONFIG_FILE} (e.g. transport: {{type: http, url: "
                              "http://marquez:5000}) or unset it")
        return path
    for path in (cwd / CONFIG_FILE, home / ".openlineage" / CONFIG_FILE):
        if path.is_file() and os.access(path, os.R_OK):
            return path
    return None


def _transport_of(path: Path) -> dict:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise OptionError(CONFIG_FILE, str(path), f"cannot be read as YAML ({' '.join(str(exc).split())})",
                          "fix the file (e.g. transport: {type: http, url: http://marquez:5000}) or remove it") \
            from None
    transport = doc.get("transport") if isinstance(doc, dict) else None
    return transport if isinstance(transport, dict) else {}


def _plain(url: str) -> str:
    """A URL without its user and password, for messages."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url


def emitter():
    """The process's OpenLineageClient, or None when lineage is off (or its settings are unusable: said once)."""
    try:
        transport = configured()
    except OptionError as exc:
        _warn_once(str(exc), f"OpenLineage events are off: {exc}")
        return None
    if transport is None:
        return None
    key = (os.getpid(), transport)
    with _lock:
        if _client.get("key") != key:
            from openlineage.client import OpenLineageClient

            try:
                client = OpenLineageClient()
            except Exception as exc:  # a transport the client cannot build: lineage off, the job goes on
                _warn_once(transport, f"OpenLineage events are off: the {transport} cannot be set up "
                                      f"({_first_line(exc)}); {FIX}")
                client = None
            old = _client.get("client")
            if old is not None:
                try:
                    old.close(0)
                except Exception:  # the settings changed: the old transport is dropped either way
                    pass
            _client.update(key=key, client=client)
        return _client["client"]


def emit(event: RunEvent) -> bool:
    """Send one event; False when lineage is off or the event was not delivered (one warning per transport and
    process). Never raises."""
    try:
        client = emitter()
        if client is None:
            return False
        client.emit(event)
        return True
    except Exception as exc:
        transport = (_client.get("key") or (None, "transport"))[1]
        _warn_once(transport, f"OpenLineage event {_state_of(event)} of job {_job_of(event)} not delivered by the "
                              f"{transport}: {_first_line(exc)}; {FIX}")
        return False


def _state_of(event) -> str:
    state = getattr(event, "eventType", None)
    return getattr(state, "value", str(state))


def _job_of(event) -> str:
    return getattr(getattr(event, "job", None), "name", "?")


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _warn_once(key: str, line: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(line)


def job_namespace(environ: Mapping[str, str] = os.environ) -> str:
    """The namespace of streamfill's jobs in the lineage graph: STREAMFILL_LINEAGE_NAMESPACE or "streamfill"."""
    return environ.get(NAMESPACE_SETTING, "").strip() or DEFAULT_NAMESPACE


def new_run_id() -> str:
    """A new run id: the client's UUIDv7, so run ids sort by their start."""
    from openlineage.client.uuid import generate_new_uuid

    return str(generate_new_uuid())


def _send(build: Callable[[], RunEvent]) -> bool:
    """Build and send an event when lineage is on; a failure to build it is a warning too, never the job's."""
    if emitter() is None:
        return False
    try:
        event = build()
    except Exception as exc:
        _warn_once(f"build {type(exc).__name__}", f"OpenLineage event not built: {_first_line(exc)}")
        return False
    return emit(event)


def running(job: str, run_id: str, inputs: Sequence = (), outputs: Sequence = (), *, output_rows: int | None = None,
            when: datetime | None = None, parent: Parent | None = None, namespace: str | None = None,
            processing: str = "STREAMING") -> bool:
    """A RUNNING event of a run in progress, e.g. a stream's announced commit: `output_rows` its rows, `when` its
    commit time."""
    namespace = namespace or job_namespace()
    return _send(lambda: run_event(RunState.RUNNING, job, run_id, inputs, outputs, namespace=namespace,
                                   parent=parent, when=when, output_rows=output_rows, processing=processing))


def aborted(job: str, run_id: str, inputs: Sequence = (), outputs: Sequence = (), *, reason: str | None = None,
            when: datetime | None = None, parent: Parent | None = None, namespace: str | None = None,
            processing: str = "BATCH") -> bool:
    """An ABORT event: a run that ended without saying so (a launch found lost), or one stopped before its end."""
    namespace = namespace or job_namespace()
    return _send(lambda: run_event(RunState.ABORT, job, run_id, inputs, outputs, namespace=namespace,
                                   parent=parent, error=reason, when=when, processing=processing))


@dataclass
class LineageRun:
    """The run `launch_run` reports. The body may set `inputs` and `outputs` (e.g. the checked table with its
    assertions) and `output_rows` (the rows the run wrote) before it ends; they go into its last event."""

    job: str
    run_id: str
    namespace: str
    parent: Parent | None
    inputs: Sequence[Any]
    outputs: Sequence[Any]
    processing: str = "BATCH"
    output_rows: int | None = None
    ended: RunState | None = None

    def event(self, state: RunState, *, error: str | None = None, when: datetime | None = None,
              output_rows: int | None = None) -> RunEvent:
        return run_event(state, self.job, self.run_id, self.inputs, self.outputs, namespace=self.namespace,
                         parent=self.parent, error=error, when=when, output_rows=output_rows,
                         processing=self.processing)

    def running(self, output_rows: int | None = None, when: datetime | None = None) -> bool:
        return _send(lambda: self.event(RunState.RUNNING, output_rows=output_rows, when=when))

    def failed(self, reason: str) -> None:
        """Ends the run as FAIL now, without an exception (a check that found bad data); no COMPLETE follows."""
        self._end(RunState.FAIL, reason)

    def aborted(self, reason: str | None = None) -> bool:
        """Ends the run as ABORT now; `launch_run` then sends no COMPLETE."""
        self.ended = RunState.ABORT
        return _send(lambda: self.event(RunState.ABORT, error=reason))

    def _end(self, state: RunState, cause: BaseException | str | None = None) -> None:
        if self.ended is None:
            self.ended = state
            _send(lambda: self.event(state, error=_cause(cause), output_rows=self.output_rows))


@contextmanager
def launch_run(job: str, inputs: Sequence[Named | Any], outputs: Sequence[Named | Any], *, parent: Parent | None,
               run_id: str | None = None, namespace: str | None = None,
               processing: str = "BATCH") -> Iterator[LineageRun]:
    """START now; COMPLETE when the body ends, FAIL with the exception's first lines when it raises (re-raised),
    ABORT on Ctrl-C (stopped before its end, no error). Inputs and outputs are `streamfill.datasets` names or
    datasets built with their facets (lineage_events.input_dataset / output_dataset)."""
    run = LineageRun(job, run_id or new_run_id(), namespace or job_namespace(), parent, list(inputs), list(outputs),
                     processing)
    _send(lambda: run.event(RunState.START))
    try:
        yield run
    except KeyboardInterrupt:
        run._end(RunState.ABORT)
        raise
    except SystemExit as exc:
        if exc.code in (None, 0):
            run._end(RunState.COMPLETE)
        else:
            run._end(RunState.FAIL, f"exit code {exc.code}")
        raise
    except BaseException as exc:
        run._end(RunState.FAIL, exc)
        raise
    run._end(RunState.COMPLETE)


def _cause(cause: BaseException | str | None) -> str | None:
    if cause is None or isinstance(cause, str):
        return cause
    lines = first_lines(cause)
    return f"{type(cause).__name__}: {lines}" if lines else type(cause).__name__

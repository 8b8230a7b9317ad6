"""How a stream stops: between two batches once the batch in flight commits, by SIGTERM, Ctrl-C or the end of the
Airflow task that started it; past its stop grace, by killing the launch."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from streamfill.console import console
from streamfill.settings import STOP_WITH_ENV


def stop_between_batches(query, timeout_s: float = 600) -> None:
    """Wait for the trigger in flight to finish (its commit included), then stop before the next one."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


class StopGrace:
    """What stops a launch: called with why (SIGTERM, its task's end), it sets `stop`, so the query ends between
    batches once the batch in flight commits, and starts the grace's timer; `ended()` says the query has stopped,
    which ends the timer, so the launch then shuts down however long that takes. Past `grace_s` with the query
    still running, `cut` kills the launch and its JVM (`_end_launch`), cutting that batch, nothing of which commits
    (its commit is one transaction) and which the next launch reads again. `wait(event, seconds)` is how the timer
    waits: whether `event` was set within the seconds."""

    def __init__(self, stop: threading.Event, grace_s: float, job: str, cut: Callable[[], None] | None = None,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        self.stop, self.grace_s, self.job = stop, grace_s, job
        self._cut, self._wait = cut or _end_launch, wait
        self._ended = threading.Event()
        # ending and cutting exclude each other: a query that stops as the grace runs out is either in time or cut
        self._lock = threading.Lock()
        self._cutting = False
        self.timer: threading.Thread | None = None

    def __call__(self, why: str) -> None:
        self.stop.set()
        with self._lock:
            if self.timer is not None or self._ended.is_set():
                return
            self.timer = threading.Thread(target=self._run_out, name="streamfill-stop-grace", daemon=True)
        console.print(f"stream {self.job}: {why}; stopping after the batch in flight commits (within "
                      f"{self.grace_s:g} s)", highlight=False)
        self.timer.start()

    def ended(self) -> bool:
        """The query has stopped: the timer ends and nothing is cut. False when the grace had run out first (the
        cut is under way)."""
        with self._lock:
            if self._cutting:
                return False
            self._ended.set()
            return True

    def _run_out(self) -> None:
        if self._wait(self._ended, self.grace_s):
            return
        with self._lock:
            if self._ended.is_set():
                return
            self._cutting = True
        console.print(f"stream {self.job}: the batch in flight did not commit within {self.grace_s:g} s of the "
                      "stop; it is cut, nothing of it commits, and the next launch reads it again", highlight=False)
        sys.stdout.flush()
        self._cut()


def _end_launch() -> None:
    """Kill this launch at once. Started by an Airflow task, the launch has a process group of its own (spark-submit's
    JVM, this driver, its Python workers); started from a shell, the group is the shell's job, which may hold other
    processes: then only the JVM this driver started, and this process."""
    if os.environ.get(STOP_WITH_ENV):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass
    os._exit(137)


def watch_task(pid: str | None, stopping: Callable[[str], None], every_s: float = 1.0) -> None:
    """Stop the launch when the Airflow task that started it is gone (Airflow's supervisor SIGKILLs a task 5 s
    after SIGTERM; the job, in a process group of its own, outlives it to commit its batch in flight)."""
    if not pid:
        return

    def watch() -> None:
        while True:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                stopping(f"its Airflow task (pid {pid}) ended")
                return
            except PermissionError:
                pass  # alive, another user's
            time.sleep(every_s)

    threading.Thread(target=watch, name="streamfill-task-watch", daemon=True).start()

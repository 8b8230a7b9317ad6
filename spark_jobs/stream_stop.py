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


def graceful_stop(stop: threading.Event, grace_s: float, job: str) -> Callable[[str], None]:
    """What stops a launch: the query ends between batches (the batch in flight commits); once `grace_s` has
    passed the launch kills itself and its JVM (`_end_launch`), cutting that batch, nothing of which commits (its
    commit is one transaction) and which the next launch reads again."""
    began = threading.Event()

    def begin(why: str) -> None:
        stop.set()
        if began.is_set():
            return
        began.set()
        console.print(f"stream {job}: {why}; stopping after the batch in flight commits (within {grace_s:g} s)",
                      highlight=False)

        def cut() -> None:
            time.sleep(grace_s)
            console.print(f"stream {job}: the batch in flight did not commit within {grace_s:g} s of the stop; it "
                          "is cut, nothing of it commits, and the next launch reads it again", highlight=False)
            sys.stdout.flush()
            _end_launch()

        threading.Thread(target=cut, name="streamfill-stop-grace", daemon=True).start()

    return begin


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

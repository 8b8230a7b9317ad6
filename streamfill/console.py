"""What a command and a job print: progress on stdout, a refusal as one line on stderr with exit code 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

from streamfill.errors import OUTAGE, REFUSAL, StreamfillError, kind_of

console = Console(soft_wrap=True)  # long lines stay whole in logs (Airflow, CI)
err = Console(stderr=True, soft_wrap=True)
# a job's exit code under spark-submit says what ended it (sysexits.h's EX_CONFIG and EX_TEMPFAIL), so the Airflow
# task that launched it knows whether a retry can help (orchestration/failures.py); any other failure exits 1
JOB_EXIT_CODES = {REFUSAL: 78, OUTAGE: 75}


def say(message: str) -> None:
    console.print(message, highlight=False)


def fail(exc: BaseException) -> SystemExit:
    """Print the error as one readable message and return the exit to raise (code 1); the exit keeps the error
    (`job_exit` reads its kind)."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)  # `key: [a]` in a message is not markup
    stop = SystemExit(1)
    stop.error = exc
    return stop


def job_exit(stop: SystemExit) -> SystemExit:
    """The exit of a job under spark-submit: a refusal's or an outage's code of JOB_EXIT_CODES (the CLI's
    commands keep code 1 for every failure)."""
    code = JOB_EXIT_CODES.get(kind_of(getattr(stop, "error", None)))
    return SystemExit(code) if code is not None and stop.code == 1 else stop


@contextmanager
def refusals(*also: type[BaseException]) -> Iterator[None]:
    """A streamfill error (and any of `also`) raised inside ends the command with its message and exit code 1,
    not a traceback."""
    try:
        yield
    except (StreamfillError, *also) as exc:
        raise fail(exc) from None

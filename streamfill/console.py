"""What a command and a job print: progress on stdout, an error as one message on stderr, and an exit code that
says what ended it (EXIT_CODES, docs/operations.md#exit-codes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

from streamfill.errors import BAD_INPUT, FAILED, HELD, OUTAGE, REFUSAL, StreamfillError, kind_of

console = Console(soft_wrap=True)  # long lines stay whole in logs (Airflow, CI)
err = Console(stderr=True, soft_wrap=True)
# The exit code of a `streamfill` command and of a job under spark-submit, by what ended it, so a script (and
# the Airflow task that launched a job, orchestration/failures.py) knows whether to fix, wait or retry: 2 as
# Click's own usage errors; sysexits.h's EX_CONFIG and EX_TEMPFAIL for a refusal and an outage; EX_CANTCREAT
# (the launch cannot take its job) for a job held by another launch, a code neither Click, Python nor
# spark-submit exits with of its own. Anything else, an unexpected error included, exits 1 (UNEXPECTED).
EXIT_CODES = {BAD_INPUT: 2, REFUSAL: 78, HELD: 73, OUTAGE: 75, FAILED: 1}
UNEXPECTED = 1


def exit_code(kind: str | None) -> int:
    """The exit code of a failure of this kind (None: not one streamfill knows)."""
    return EXIT_CODES.get(kind, UNEXPECTED)


def say(message: str) -> None:
    console.print(message, highlight=False)


def tell(message: str) -> None:
    """One line on stderr, beside the command's output rather than in it (what a command fell back to)."""
    err.print(message, highlight=False, markup=False)


def fail(exc: BaseException) -> SystemExit:
    """Print the error as one readable message and return the exit to raise: the code of the kind `exc` says of
    itself (EXIT_CODES). The exit keeps the error (`.error`)."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)  # `key: [a]` in a message is not markup
    stop = SystemExit(exit_code(kind_of(exc)))
    stop.error = exc
    return stop


@contextmanager
def refusals(*also: type[BaseException]) -> Iterator[None]:
    """A streamfill error (and any of `also`) raised inside ends the command with its message and its kind's exit
    code, not a traceback."""
    try:
        yield
    except (StreamfillError, *also) as exc:
        raise fail(exc) from None

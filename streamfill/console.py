"""What a command and a job print: progress on stdout, a refusal as one line on stderr with exit code 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

from streamfill.errors import StreamfillError

console = Console(soft_wrap=True)  # long lines stay whole in logs (Airflow, CI)
err = Console(stderr=True, soft_wrap=True)


def say(message: str) -> None:
    console.print(message, highlight=False)


def fail(exc: BaseException) -> SystemExit:
    """Print the error as one readable message and return the exit to raise (code 1)."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)  # `key: [a]` in a message is not markup
    return SystemExit(1)


@contextmanager
def refusals(*also: type[BaseException]) -> Iterator[None]:
    """A streamfill error (and any of `also`) raised inside ends the command with its message and exit code 1,
    not a traceback."""
    try:
        yield
    except (StreamfillError, *also) as exc:
        raise fail(exc) from None

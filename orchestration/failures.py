"""Failures classed for Airflow: bad input, a refusal or a job still held by another launch fails the task at once
(AirflowFailException: its retries cannot help), an outage or any other failure is left to the task's retries. A
task raises the errors of streamfill's checks itself; a job launched with spark-submit says what ended it by its
exit code (streamfill.console.EXIT_CODES)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from streamfill.console import EXIT_CODES
from streamfill.errors import BAD_INPUT, HELD, OUTAGE, REFUSAL, kind_of

KIND_OF_EXIT = {code: kind for kind, code in EXIT_CODES.items()}
# a held job among them: the task's launch already waited for the launch holding it (--wait-for-job), so that
# one is not ending by itself (a stream, another launch from a terminal); a person decides which one runs
NOT_RETRIED_KINDS = frozenset({BAD_INPUT, REFUSAL, HELD})
NOT_RETRIED = "not retried: fix what it names, then clear the task"


def refused(exc: BaseException) -> bool:
    """Whether the task's retries cannot overcome `exc`: streamfill's bad input, refusals and held jobs, and a
    connection Airflow does not have."""
    return kind_of(exc) in NOT_RETRIED_KINDS or isinstance(exc, AirflowNotFoundException)


@contextmanager
def classed() -> Iterator[None]:
    """A refusal raised inside fails the task without a retry, its message kept; anything else passes as is."""
    try:
        yield
    except AirflowFailException:
        raise
    except Exception as exc:
        if refused(exc):
            raise AirflowFailException(f"{exc} ({NOT_RETRIED})") from exc
        raise


def launch_failed(script: str, code: int) -> AirflowException:
    """The task's error for a spark-submit of `script` that exited with `code`: bad input, a refusal or a held job
    fails the task for good, anything else (an outage, a crash, a kill) is retried."""
    kind = KIND_OF_EXIT.get(code)
    if kind == HELD:
        return AirflowFailException(f"{script} found its job held by another launch after waiting for it (exit "
                                    f"code {code}), its message above names the launch; {NOT_RETRIED}")
    if kind in NOT_RETRIED_KINDS:
        return AirflowFailException(f"{script} refused to run (exit code {code}): a configuration error or a "
                                    f"refusal, its message is above; {NOT_RETRIED}")
    if kind == OUTAGE:
        return AirflowException(f"{script} could not reach a service it needs (exit code {code}), its message is "
                                "above; retried")
    return AirflowException(f"{script} exited with {code}; its output is above")

"""How a command or a job's launch ends on an error: one message on stderr and the exit code of what ended it
(streamfill.console.EXIT_CODES). streamfill's own errors say their kind; the libraries' errors for a service out of
reach (PostgreSQL, Kafka, an HTTP API such as Airflow's) are outages; anything else is unexpected, a bug as
likely as not, and keeps its traceback for whoever fixes it (without local variables, which may hold secrets)."""

from __future__ import annotations

import traceback
import urllib.error

from confluent_kafka import KafkaError, KafkaException

from streamfill.connectors.kafka.broker import retriable
from streamfill.console import fail
from streamfill.errors import OUTAGE, StreamfillError
from streamfill.offsets_db.engine import unreachable

# librdkafka's own errors for brokers it cannot reach: not flagged retriable, yet a later try may find them back
_KAFKA_OUT_OF_REACH = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                                 KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT})


class ServiceUnreachable(StreamfillError):
    """A library's own error for a service out of reach, where no streamfill error named the service."""

    kind = OUTAGE


def ended(exc: BaseException) -> SystemExit:
    """Print `exc` and return the exit to raise."""
    if isinstance(exc, StreamfillError):
        return fail(exc)
    what = out_of_reach(exc)
    if what is not None:
        return fail(ServiceUnreachable(what))
    traceback.print_exception(exc)
    return fail(RuntimeError(f"unexpected {type(exc).__name__}: {exc}"))


def out_of_reach(exc: BaseException) -> str | None:
    """What `exc` says is out of reach, or None when it says something else."""
    if unreachable(exc):
        return f"cannot reach PostgreSQL: {' '.join(str(getattr(exc, 'orig', None) or exc).split())}"
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError) and (retriable(exc) or err.code() in _KAFKA_OUT_OF_REACH):
        return f"cannot reach Kafka: {err.str()}"
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return f"cannot reach a service over HTTP: {exc.reason}"
    if isinstance(exc, ConnectionError):
        return f"cannot reach a service: {exc}"
    return None

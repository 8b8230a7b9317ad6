"""The pipelines jobs can run, by name: how a topic's records become rows and dead letters (`parse`), and what
quality checks promise about the table (`expectations`). The jobs file names a pipeline with `suite:`.

This registry is the one place that knows the pipelines; the stream, the backfill and the quality checks
only receive one. Today it holds the demo's `orders` (spark_jobs/demo/orders.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streamfill.errors import OptionError


@dataclass(frozen=True)
class Pipeline:
    name: str
    parse: Callable  # Kafka DataFrame -> rows with `_error` and `_raw` for the sink's dead letters
    expectations: Callable[[], list]  # GX expectations of the pipeline's own rules


def _orders() -> Pipeline:
    from spark_jobs.demo import orders

    return Pipeline("orders", orders.parse_events, orders.expectations)


_KNOWN: dict[str, Callable[[], Pipeline]] = {"orders": _orders}
NAMES = tuple(_KNOWN)


def get(name: str, option: str = "suite") -> Pipeline:
    if name not in _KNOWN:
        raise OptionError(option, name, f"suite {name!r} is not known", f"use one of {', '.join(NAMES)}")
    return _KNOWN[name]()

"""The one duration parser: `500ms`, `30s`, `15m` (or `15min`), `2h`, `1d`, for maxTriggerDelay, --trigger and
--since alike."""

from __future__ import annotations

import re

from streamfill.errors import OptionError

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|min|m|h|d)?\s*", re.IGNORECASE)


def parse_ms(raw: str, default_unit: str = "ms") -> int | None:
    """Milliseconds, or None when `raw` is not a duration (callers raise with their own option name)."""
    m = _DURATION.fullmatch(raw or "")
    if not m:
        return None
    unit = (m.group(2) or default_unit).lower()
    return int(m.group(1)) * UNITS_MS[unit]


def split(raw: str) -> tuple[int, str] | None:
    """(number, unit) as written, for callers that keep the unit (Spark's processingTime)."""
    m = _DURATION.fullmatch(raw or "")
    return None if not m or not m.group(2) else (int(m.group(1)), m.group(2).lower())


DEFAULT_STOP_GRACE = "60s"  # a stopped stream's time to commit its batch in flight (an entry's stop_grace)


def stop_grace_seconds(raw: str, option: str = "--stop-grace") -> float:
    """A stop grace such as 60s or 5m (a bare number is seconds), at least a second."""
    ms = parse_ms(raw, default_unit="s")
    if ms is None or ms < 1000:
        raise OptionError(option, raw, "is not a stop grace", "give a duration of at least 1s, such as 60s or 5m: "
                                                              "how long a stopped stream may take to commit its batch "
                                                              "in flight")
    return ms / 1000

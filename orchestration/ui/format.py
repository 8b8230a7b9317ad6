"""Pure helpers of the streamfill page: the window a user asks for, how ages, counts and raw bytes are shown, and
when a long window is drawn in buckets. No Airflow, no database: unit-tested on their own."""

from __future__ import annotations

import string
from collections.abc import Mapping
from datetime import datetime, timedelta

WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
DEFAULT_WINDOW = "1h"
MAX_POINTS = 1000  # per plot trace: above it a window is drawn in time buckets
PRINTABLE = frozenset(string.printable.encode()) - frozenset(b"\t\n\r\x0b\x0c")


class WindowError(ValueError):
    """A window that is not one of WINDOWS; the message names the value and the choices."""


def parse_window(raw: str | None) -> tuple[str, timedelta]:
    """`1h`, `24h` or `7d` (default 1h) as (its name, its length)."""
    name = (raw or DEFAULT_WINDOW).strip().lower()
    if name not in WINDOWS:
        raise WindowError(f"window {raw!r} is not one the page draws; use one of {', '.join(WINDOWS)}")
    return name, WINDOWS[name]


def bucket_for(window: timedelta, batches: int, max_points: int = MAX_POINTS) -> timedelta | None:
    """None while the window's batches fit in `max_points` (one point per batch), else the bucket width that
    keeps a trace at `max_points` points or fewer (whole seconds)."""
    if batches <= max_points:
        return None
    return timedelta(seconds=max(1, -(-int(window.total_seconds()) // max_points)))


def age(then: datetime | None, now: datetime) -> str:
    """`42 s`, `5 min`, `3 h 20 min`, `2 d 4 h`; `never` for None."""
    if then is None:
        return "never"
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def count(value: int | float | None) -> str:
    """Thousands separated, `-` for nothing known."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


def safe_bytes(raw: bytes | memoryview | None, limit: int = 200) -> dict[str, str | bool]:
    """A raw record value as a person can read it without the page running or mangling it: `text` is the bytes
    as ASCII with every other byte as \\xNN (the template escapes the rest), `hex` the first `limit` bytes in
    hex, `truncated` whether the value was longer than `limit`."""
    if raw is None:
        return {"text": "(no value)", "hex": "", "truncated": False}
    data = bytes(raw)
    shown = data[:limit]
    text = "".join(chr(b) if b in PRINTABLE else f"\\x{b:02x}" for b in shown)
    return {"text": text, "hex": shown.hex(" "), "truncated": len(data) > limit}


def iso(when: datetime | None) -> str | None:
    """For plots: ISO-8601 in UTC to the millisecond, which Plotly reads as a date."""
    return None if when is None else when.isoformat(timespec="milliseconds")


def per_second(amount: int | float | None, seconds: float | None) -> float | None:
    """amount / seconds, None when either is unknown or no time passed."""
    if amount is None or not seconds or seconds <= 0:
        return None
    return round(float(amount) / float(seconds), 1)


Partition = tuple[str, int]


def lag_now(positions: Mapping[Partition, int], log_ends: Mapping[Partition, int] | None,
            window: Mapping[Partition, tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """(total, worst partition) of what a job has left to read. A bounded job (a backfill's `window` of [start,
    end) per partition): the offsets of its range not yet committed, whatever the log holds beyond it. Any
    other: the broker's log end now minus the job's next offset. None when the log ends are unknown."""
    if window is not None:
        left = [max(end - positions.get(tp, start), 0) for tp, (start, end) in window.items()]
    elif log_ends is None:
        return None
    else:
        left = [max(log_ends[tp] - offset, 0) for tp, offset in positions.items() if tp in log_ends]
    return (sum(left), max(left)) if left else None


def window_of(config: Mapping | None) -> dict[Partition, tuple[int, int]] | None:
    """A backfill's recorded range ({"topic:partition": [start, end]} under config["backfill"]["window"])."""
    raw = ((config or {}).get("backfill") or {}).get("window")
    if not raw:
        return None
    return {(key.rpartition(":")[0], int(key.rpartition(":")[2])): (int(s), int(e)) for key, (s, e) in raw.items()}

"""How long offsets_db keeps each kind of history (docs/operations.md#retention): the kinds, their default ages
and their settings, defined once for the settings, `streamfill db prune` and the maintenance DAG."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta

from streamfill.durations import parse_ms

FOREVER = "forever"


@dataclass(frozen=True)
class Retention:
    """The age after which each kind is removed; None keeps it forever."""

    history: timedelta | None = timedelta(days=90)  # committed batches and their offsets, runs, data-loss events
    windows: timedelta | None = timedelta(days=90)  # an interval window's whole job, after its last commit
    dead_letters: timedelta | None = timedelta(days=30)  # with their raw bytes
    quality_results: timedelta | None = timedelta(days=90)  # each validation's full result
    announcements: timedelta | None = timedelta(days=7)  # delivered announcements of commits
    stages: timedelta | None = timedelta(days=7)  # staging tables no running launch uses
    # a table's deleted keys whose records Kafka no longer holds; the age outlasts any batch between its read and
    # its commit (one that read an older record before Kafka dropped it commits after the prune otherwise)
    deleted_keys: timedelta | None = timedelta(days=7)

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def describe(self) -> str:
        return ", ".join(f"{kind} {written(getattr(self, kind))}" for kind in self.kinds())


DEFAULT = Retention()


def parse_age(raw: str) -> timedelta | None:
    """`90d`, `12h`, `30m` (a bare number is days) or `forever`; ValueError naming the forms otherwise."""
    if raw.strip().lower() == FOREVER:
        return None
    ms = parse_ms(raw, default_unit="d")
    if ms is None or ms <= 0:
        raise ValueError(f"{raw!r} is not an age: write a positive duration such as 90d, 12h or 30m, or "
                         f"{FOREVER}")
    return timedelta(milliseconds=ms)


def written(age: timedelta | None) -> str:
    """An age as the settings take it: whole days as `90d`, otherwise seconds; `forever` for None."""
    if age is None:
        return FOREVER
    seconds = int(age.total_seconds())
    return f"{seconds // 86_400}d" if seconds % 86_400 == 0 else f"{seconds}s"

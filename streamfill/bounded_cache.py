"""A process's cache of values built once per key, holding at most a given number and dropping the least recently
used; what it drops can be closed (a Kafka consumer, a database engine, a registry client), so a long-lived
process never piles them up. For keys that are not the arguments a value is built from (functools.lru_cache keys
on those)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """`get(key, build)`: the value of `key`, built by `build()` on first use; `close(key, value)` runs on each
    value the cache drops."""

    def __init__(self, size: int, close: Callable[[K, V], object] | None = None) -> None:
        self._size = size
        self._close = close
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()  # a backfill builds its chunks in threads

    def get(self, key: K, build: Callable[[], V]) -> V:
        dropped: list[tuple[K, V]] = []
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = build()  # built under the lock, so each key is built once
            self._values[key] = value
            while len(self._values) > self._size:
                dropped.append(self._values.popitem(last=False))
        # closed outside the lock: a slow close (a consumer leaving its group) holds up no other caller
        for dropped_key, old in dropped:
            if self._close is not None:
                self._close(dropped_key, old)
        return value

    def values(self) -> Iterator[V]:
        with self._lock:
            return iter(list(self._values.values()))

"""The one bounded cache (streamfill/bounded_cache.py): each key built once, at most `size` kept, the least
recently used dropped and closed."""

from __future__ import annotations

import threading

import pytest

from streamfill.bounded_cache import BoundedCache

pytestmark = pytest.mark.unit


def test_the_least_recently_used_is_dropped_and_closed_and_a_key_is_built_once():
    built, closed = [], []
    cache = BoundedCache(2, close=lambda key, value: closed.append((key, value)))

    def get(key):
        return cache.get(key, lambda: built.append(key) or key.upper())

    assert [get("a"), get("b"), get("a"), get("c")] == ["A", "B", "A", "C"]
    assert built == ["a", "b", "c"] and closed == [("b", "B")]
    assert sorted(cache.values()) == ["A", "C"]


def test_threads_asking_for_one_key_get_one_value():
    made = []
    cache = BoundedCache(4)
    start = threading.Barrier(8)

    def ask():
        start.wait()
        cache.get("k", lambda: made.append(1) or object())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1

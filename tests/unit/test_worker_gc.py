"""The freeze that spares Spark's reused Python workers a full collection of their imports after every call."""

from __future__ import annotations

import gc
import sys
import types

import pytest

from streamfill.connectors.spark import worker_gc

pytestmark = pytest.mark.unit


@pytest.fixture
def fresh(monkeypatch):
    """Each test starts with nothing frozen and no freeze remembered, and leaves it that way."""
    gc.unfreeze()
    monkeypatch.setattr(worker_gc, "_modules_at_freeze", 0)
    yield
    gc.unfreeze()


def test_outside_a_reused_worker_nothing_is_frozen(fresh, monkeypatch):
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    worker_gc.freeze_after_imports()
    assert gc.get_freeze_count() == 0


def _frozen(objects: list) -> int:
    """How many of these tracked objects sit in the permanent generation (gc.get_objects leaves those out).
    Counting them, not gc.get_freeze_count(), holds while other frozen objects are freed meanwhile."""
    collectable = {id(o) for o in gc.get_objects()}
    return sum(id(o) not in collectable for o in objects)


def test_a_reused_worker_freezes_once_and_again_only_after_new_imports(fresh, monkeypatch):
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    worker_gc.freeze_after_imports()
    frozen = gc.get_freeze_count()
    assert frozen > 0

    kept = [[i] for i in range(1000)]  # tracked objects made by a task, not by an import
    worker_gc.freeze_after_imports()
    assert _frozen(kept) == 0, "a call that loaded no module must not freeze a task's objects"
    assert gc.get_freeze_count() <= frozen

    monkeypatch.setitem(sys.modules, "streamfill_test_new_module", types.ModuleType("streamfill_test_new_module"))
    worker_gc.freeze_after_imports()
    assert _frozen(kept) == len(kept)

"""Spark's reused Python workers run a full gc.collect() after every task and every planning call: moving what the
imports made into the permanent generation (gc.freeze) leaves those collections only what a call makes."""

from __future__ import annotations

import gc
import os
import sys

_modules_at_freeze = 0


def freeze_after_imports() -> None:
    """Freeze what is tracked now if modules were loaded since the last freeze, inside a reused Spark Python
    worker only. Called first thing in each call Spark makes into a worker: the collection after the previous
    call has just run, so what is frozen is what the imports keep alive, not a task's garbage."""
    global _modules_at_freeze
    if os.environ.get("SPARK_REUSE_WORKER") and len(sys.modules) != _modules_at_freeze:
        gc.freeze()
        _modules_at_freeze = len(sys.modules)

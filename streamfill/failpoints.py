"""Named crash points for recovery tests (the failpoints of FoundationDB and TiKV, reduced to three actions).

Off unless `STREAMFILL_FAILPOINT` names a point. Then its `STREAMFILL_FAILPOINT_AT`-th hit (counted across
processes in `STREAMFILL_FAILPOINT_DIR`) does `STREAMFILL_FAILPOINT_ACTION`:
- `kill` (default): SIGKILL the process group `STREAMFILL_FAILPOINT_PGID` (set by `pin_group` when a Spark
  session starts), i.e. the whole Spark driver, JVM and Python workers at once;
- `pause`: wait for a `go` file, so a test can break something at exactly that moment;
- `exit`: this process dies one second later (a lost Python worker; its native client threads run on).

Points: `source.planned` (range recorded, before the tasks write), `sink.staged` (tasks wrote, before the
Postgres commit), `sink.committed` (after the Postgres commit, before Spark's commit log),
`kafka_sink.batch_sent` (a Kafka sink task handed one more Arrow batch to its producer).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def pin_group() -> None:
    """Make `kill` target this process's group. Called where a Spark driver starts: Spark's Python daemon puts
    the workers it forks (the data sources' commit runs in one) into a process group of their own."""
    if os.environ.get("STREAMFILL_FAILPOINT") and not os.environ.get("STREAMFILL_FAILPOINT_PGID"):
        os.environ["STREAMFILL_FAILPOINT_PGID"] = str(os.getpgrp())


def hit(point: str) -> None:
    if os.environ.get("STREAMFILL_FAILPOINT") != point:
        return
    folder = Path(os.environ["STREAMFILL_FAILPOINT_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "hits", "a") as f:  # one byte per hit; appends are atomic
        f.write(".")
    if (folder / "hits").stat().st_size != int(os.environ.get("STREAMFILL_FAILPOINT_AT", "1")):
        return
    action = os.environ.get("STREAMFILL_FAILPOINT_ACTION", "kill")
    if action == "pause":
        (folder / "reached").touch()
        deadline = time.monotonic() + 300
        while not (folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    if action == "exit":
        time.sleep(1)
        os._exit(70)
    os.killpg(int(os.environ.get("STREAMFILL_FAILPOINT_PGID") or os.getpgrp()), signal.SIGKILL)

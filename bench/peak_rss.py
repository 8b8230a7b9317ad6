"""The peak RSS of a process tree, sampled from /proc every 0.2 s in a process of its own (sampling from the
measured process would take its interpreter's lock from the threads it times). Prints one JSON line, the peaks
in bytes by kind, once its standard input closes. PeakRss runs it around a block of code.

    python bench/peak_rss.py ROOT_PID
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
from pathlib import Path

KINDS = ("driver python", "driver JVM", "python workers")


def descendants(root: int) -> list[tuple[int, str, int]]:
    """(pid, command line, RSS bytes) of every process under root, root included."""
    parents, info = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        parents[pid] = int(fields.get("PPid", "0").strip())
        info[pid] = (cmd, int(fields.get("VmRSS", "0 kB").split()[0]) * 1024)
    out = []
    for pid, (cmd, rss) in info.items():
        p = pid
        while p and p != root:
            p = parents.get(p, 0)
        if p == root:
            out.append((pid, cmd, rss))
    return out


def sample(root: int) -> dict[str, int]:
    now = dict.fromkeys(KINDS, 0)
    for pid, cmd, rss in descendants(root):
        kind = ("driver python" if pid == root else "driver JVM" if "java" in cmd.split(" ")[0]
                else "python workers" if "pyspark" in cmd or "python" in cmd else None)
        if kind:
            now[kind] += rss
    return now


class PeakRss:
    """The peak RSS of the driver's Python (this process), its JVM and the Python workers while the block runs,
    sampled by this script in a process of its own; `peak` once the block ended."""

    def __enter__(self) -> PeakRss:
        self._sampler = subprocess.Popen([sys.executable, __file__, str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self._sampler.communicate("")  # closing its stdin ends the sampling
        self.peak = json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=int, help="the process whose tree is sampled")
    root = ap.parse_args().root
    peak = dict.fromkeys(KINDS, 0)
    while not select.select([sys.stdin], [], [], 0.2)[0]:  # until the parent closes our stdin
        for kind, value in sample(root).items():
            peak[kind] = max(peak[kind], value)
    print(json.dumps(peak))


if __name__ == "__main__":
    main()

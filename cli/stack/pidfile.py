"""Pid files that are checked before they are believed.

A pid file outlives its process; after pid reuse the number names an unrelated process, and signalling its
group would hit whatever it is. So a pid file records the process's start time and command line, and a pid
counts only while /proc still shows that start time and that command line; otherwise the file is stale and
removed, and nothing is signalled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PidRecord", "argv_matches", "cmdline", "live_pid", "pid_alive", "read_pid", "read_record",
           "start_ticks", "started_at", "write_record"]


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _stat_fields(pid)[:1] not in ([], ["Z"])


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on; the command name before it may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/<pid>/stat); None when gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def started_at(pid: int) -> float | None:
    """The process's start as a Unix time."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def argv_matches(actual: Sequence[str], argv: Sequence[str]) -> bool:
    """True when the process's command line is argv, or argv run through an interpreter: the kernel puts a
    script's `#!` interpreter (and its option) in front, so `airflow standalone` shows as
    `python3.11 .../airflow standalone`."""
    return bool(argv) and len(actual) >= len(argv) and list(actual[len(actual) - len(argv):]) == list(argv)


@dataclass(frozen=True)
class PidRecord:
    pid: int
    start: int | None = None  # clock ticks since boot; None in pid files of older stacks (just the number)
    argv: tuple[str, ...] = ()

    def is_running(self, legacy_argv: Sequence[str] = (), legacy_cwd: Path | None = None) -> bool:
        """This record's process is still alive and still the one that was started. A record without a
        command line (an older stack's) counts when the command line ends with legacy_argv and, when
        given, the process works in legacy_cwd."""
        if not pid_alive(self.pid):
            return False
        if self.argv:
            return start_ticks(self.pid) == self.start and argv_matches(cmdline(self.pid), self.argv)
        same_cwd = legacy_cwd is None or _cwd(self.pid) == legacy_cwd.resolve()
        return argv_matches(cmdline(self.pid), legacy_argv) and same_cwd


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def write_record(pid_file: Path, pid: int, argv: Sequence[str]) -> None:
    """pid on the first line (what older readers read), then start time and command line as JSON."""
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = pid_file.with_name(pid_file.name + ".tmp")
    tmp.write_text(f"{pid}\n{json.dumps({'start': start_ticks(pid), 'argv': list(argv)})}\n")
    tmp.replace(pid_file)


def read_record(pid_file: Path) -> PidRecord | None:
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0].strip())
    except (OSError, ValueError, IndexError):
        return None
    try:
        extra = json.loads(lines[1]) if len(lines) > 1 else {}
        return PidRecord(pid, extra.get("start"), tuple(extra.get("argv") or ()))
    except (ValueError, AttributeError):
        return PidRecord(pid)


def read_pid(pid_file: Path) -> int | None:
    record = read_record(pid_file)
    return record.pid if record else None


def live_pid(pid_file: Path, legacy_argv: Sequence[str] = (), legacy_cwd: Path | None = None) -> int | None:
    """The pid of pid_file while its process is the one the stack started; a stale file is removed, so a
    later stop never signals what the number names now. legacy_*: how to recognise the process of an older
    stack's pid file (PidRecord.is_running)."""
    record = read_record(pid_file)
    if record is None:
        return None
    if record.is_running(legacy_argv, legacy_cwd):
        return record.pid
    pid_file.unlink(missing_ok=True)
    return None

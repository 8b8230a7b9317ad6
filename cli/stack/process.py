"""Detached processes with pid files, port probes and bounded waits: what every service needs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from streamfill.cli.stack.logrotate import rotate
from streamfill.cli.stack.pidfile import cmdline, pid_alive, read_pid, write_record
from streamfill.errors import StackError

__all__ = ["StackError", "UMASK", "children", "port_free", "pid_alive", "read_pid", "spawn", "stop_group",
           "wait_until", "tail"]

# what services create (data, logs, Airflow's generated config with its keys) is their owner's alone
UMASK = 0o077


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (a bind succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def spawn(cmd: Sequence[str], *, log: Path, pid_file: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> int:
    """Start cmd in a session of its own (so the whole group can be stopped) with umask 077, its output
    appended to log (rotated first when it is over the size limit), and record its pid with its start time
    and command line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    rotate(log)
    with open(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as out:
        os.fchmod(out.fileno(), 0o600)  # a log of an older stack too
        proc = subprocess.Popen(
            list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True, umask=UMASK,
        )
    _wait_for_exec(proc)
    write_record(pid_file, proc.pid, cmd)
    return proc.pid


def _wait_for_exec(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Until the child shows its command line: right after Popen returns, /proc/<pid>/cmdline can still be
    empty, and a pid record checked then would look stale."""
    deadline = time.monotonic() + timeout
    while not cmdline(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def stop_group(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the process group led by pid, then SIGKILL what is left after timeout."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return
            time.sleep(0.2)


def _live_processes() -> list[tuple[int, list[str]]]:
    """(pid, /proc/<pid>/stat from field 3 on) of every process that is not a zombie."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields and fields[0] != "Z":
            out.append((int(entry.name), fields))
    return out


def _group_alive(pgid: int) -> bool:
    return any(int(fields[2]) == pgid for _, fields in _live_processes())


def children(pid: int) -> list[int]:
    """The live (not zombie) child processes of pid."""
    return [child for child, fields in _live_processes() if int(fields[1]) == pid]


def wait_until(check: Callable[[], bool], *, timeout: float, service: str, log: Path,
               alive: Callable[[], bool] = lambda: True) -> None:
    """Poll check() until it is true; fail naming the service and its log when it is not in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise StackError(f"{service} exited during start-up; see its log: {log}")
        time.sleep(0.5)
    raise StackError(f"{service} did not answer within {timeout:.0f} s; see its log: {log}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

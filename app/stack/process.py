"""Detached processes with pid files, port probes and bounded waits: what every service needs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from streamfill.errors import StackError

__all__ = ["StackError", "port_free", "pid_alive", "read_pid", "spawn", "stop_group", "wait_until", "tail"]


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (a bind succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def spawn(cmd: Sequence[str], *, log: Path, pid_file: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> int:
    """Start cmd in a session of its own (so the whole group can be stopped) and record its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
        )
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(str(proc.pid))
    return proc.pid


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


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().split(")")[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


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

"""What the stack asks of each local service."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from streamfill.cli.stack.pidfile import live_pid, started_at
from streamfill.cli.stack.process import stop_group
from streamfill.settings import Settings


@dataclass(frozen=True)
class Status:
    name: str
    address: str
    pid: int | None
    running: bool
    healthy: bool
    log: Path
    detail: str = ""


class Service(ABC):
    name: str
    directory: str | None = None  # its folder under STREAMFILL_HOME, when not its name

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def root(self) -> Path:
        """Where the service keeps what it installs and writes."""
        return self.settings.home / (self.directory or self.name)

    @property
    def log(self) -> Path:
        return self.settings.logs / f"{self.name}.log"

    @abstractmethod
    def ports(self) -> list[tuple[int, str]]:
        """(port, setting that changes it) for every port the service listens on."""

    @abstractmethod
    def prepare(self) -> None:
        """Install, fetch and initialise whatever start() needs; idempotent."""

    @abstractmethod
    def running(self) -> bool:
        """True when the process that up() started is alive."""

    def pid(self) -> int | None:
        return None

    def started_at(self) -> float | None:
        """When the running process started (Unix time); None when not running or not a process."""
        return None

    def broken(self) -> bool:
        """Running, yet sure not to answer again without a restart."""
        return False

    def problem(self) -> str:
        """Why healthy() is false, in words for `stack up`'s message."""
        return "its health check got no answer"

    @abstractmethod
    def start(self) -> None:
        """Start and wait until a real request succeeds."""

    @abstractmethod
    def healthy(self) -> bool:
        """One real request (metadata, SELECT 1, health endpoint) answered."""

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def status(self) -> Status: ...


class ProcessGroupService(Service):
    """A service that up() spawns in a session of its own and records in `run/<name>.pid` (cli/stack/pidfile:
    believed only while /proc shows the process it recorded)."""

    @property
    def pid_file(self) -> Path:
        return self.settings.home / "run" / f"{self.name}.pid"

    @abstractmethod
    def command(self) -> list[str]:
        """What start() spawns."""

    def signature(self) -> tuple[list[str], Path | None]:
        """How the process of an older stack's pid file (the number alone) is recognised: the end of its
        command line, and its working directory when that names this stack."""
        return self.command(), None

    def pid(self) -> int | None:
        return live_pid(self.pid_file, *self.signature())

    def running(self) -> bool:
        return self.pid() is not None

    def started_at(self) -> float | None:
        pid = self.pid()
        return None if pid is None else started_at(pid)

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            stop_group(pid, timeout=30)
        self.pid_file.unlink(missing_ok=True)

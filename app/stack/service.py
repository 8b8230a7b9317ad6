"""What the stack asks of each local service."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from app.stack.process import pid_alive, read_pid, stop_group
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

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def log(self) -> Path:
        return self.settings.logs / f"{self.name}.log"

    @abstractmethod
    def ports(self) -> list[tuple[int, str]]:
        """(port, setting that changes it) for every port the service listens on."""

    def prepare(self) -> None:
        """Install, fetch and initialise whatever start() needs; idempotent."""

    @abstractmethod
    def running(self) -> bool:
        """True when the process that up() started is alive."""

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
    """A service that up() spawns in a session of its own and records in `run/<name>.pid`."""

    @property
    def pid_file(self) -> Path:
        return self.settings.home / "run" / f"{self.name}.pid"

    def running(self) -> bool:
        pid = read_pid(self.pid_file)
        return pid is not None and pid_alive(pid)

    def stop(self) -> None:
        pid = read_pid(self.pid_file)
        if pid is not None and pid_alive(pid):
            stop_group(pid, timeout=30)
        self.pid_file.unlink(missing_ok=True)

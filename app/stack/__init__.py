"""The local stack: PostgreSQL, Kafka, Airflow and Spark on one machine, without Docker.

`up` checks every port first, so a clash stops it before anything starts; a service that fails to answer
stops what this call started.
"""

from __future__ import annotations

from collections.abc import Callable

from app.stack.airflow import Airflow
from app.stack.kafka import Kafka
from app.stack.postgres import Postgres
from app.stack.process import port_free, tail, wait_until
from app.stack.service import Service, Status
from app.stack.spark import Spark
from offsets_db.migrate import upgrade
from streamfill.errors import StackError
from streamfill.settings import Settings

__all__ = ["StackError", "Status", "services", "up", "down", "status"]

Say = Callable[[str], None]


def services(settings: Settings) -> list[Service]:
    """In start order: Airflow keeps its metadata in PostgreSQL."""
    return [Postgres(settings), Kafka(settings), Airflow(settings), Spark(settings)]


def _check_ports(todo: list[Service], settings: Settings) -> None:
    for svc in todo:
        for port, setting in svc.ports():
            if not port_free(settings.host, port):
                raise StackError(
                    f"port {port} on {settings.host} is already in use, so {svc.name} cannot start there; "
                    f"stop what holds it, or set {setting} to a free port")


def up(settings: Settings, say: Say = print) -> list[Status]:
    all_services = services(settings)
    todo = [s for s in all_services if not s.running()]
    if not todo:
        for svc in all_services:
            if not svc.healthy():
                wait_until(svc.healthy, timeout=settings.start_timeout, service=svc.name, log=svc.log)
        say("stack already up: nothing to do")
        return status(settings)
    _check_ports(todo, settings)
    started: list[Service] = []
    try:
        for svc in all_services:
            if svc in todo:
                say(f"{svc.name}: preparing")
                svc.prepare()
                say(f"{svc.name}: starting")
                started.append(svc)
                svc.start()
            elif not svc.healthy():
                wait_until(svc.healthy, timeout=settings.start_timeout, service=svc.name, log=svc.log)
            say(f"{svc.name}: up")
            if isinstance(svc, Postgres):
                upgrade(settings.offsets_db_url)
                say("offsets_db: migrations applied")
    except BaseException as exc:
        for svc in reversed(started):
            svc.stop()
        if isinstance(exc, StackError) and started:
            last_lines = tail(started[-1].log)
            raise StackError(f"{exc}\nstopped what this call started: {', '.join(s.name for s in started)}"
                             + (f"\nlast lines of {started[-1].log}:\n{last_lines}" if last_lines else "")) from exc
        raise
    return status(settings)


def down(settings: Settings, say: Say = print) -> None:
    running = [s for s in services(settings) if s.ports() and s.running()]
    if not running:
        say("stack is not running: nothing to stop")
        return
    for svc in reversed(running):
        svc.stop()
        say(f"{svc.name}: stopped")


def status(settings: Settings) -> list[Status]:
    return [svc.status() for svc in services(settings)]

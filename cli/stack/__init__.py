"""The local stack: PostgreSQL, Kafka, a schema registry, Airflow and Spark on one machine, without Docker.

`up` checks the ports of every stopped service first, so a clash stops it before anything starts. It starts
what is stopped and restarts what runs but does not answer (saying so); a service that fails to start is
stopped, and the services that answer are left running, whatever happened to another one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamfill.cli.stack.airflow import Airflow
from streamfill.cli.stack.kafka import Kafka
from streamfill.cli.stack.postgres import Postgres
from streamfill.cli.stack.process import port_free, tail
from streamfill.cli.stack.schema_registry import SchemaRegistry
from streamfill.cli.stack.service import Service, Status
from streamfill.cli.stack.spark import Spark
from streamfill.cli.stack.spark_connect import SparkConnect
from streamfill.errors import StackError
from streamfill.offsets_db.migrate import upgrade
from streamfill.settings import Settings

__all__ = ["StackError", "Status", "services", "up", "down", "status"]

Say = Callable[[str], None]
# how long a running service that does not answer may take to recover (a scheduler heartbeat after
# PostgreSQL came back, say) before up restarts it; one still in its start-up gets its whole start_timeout
GRACE = 30.0


def services(settings: Settings) -> list[Service]:
    """In start order: Airflow keeps its metadata in PostgreSQL."""
    return [Postgres(settings), Kafka(settings), SchemaRegistry(settings), Airflow(settings), Spark(settings),
            SparkConnect(settings)]


def _check_ports(todo: list[Service], settings: Settings) -> None:
    for svc in todo:
        for port, setting in svc.ports():
            if not port_free(settings.host, port):
                raise StackError(
                    f"port {port} on {settings.host} is already in use, so {svc.name} cannot start there; "
                    f"stop what holds it, or set {setting} to a free port")


def answers(svc: Service, settings: Settings) -> bool:
    """Whether a running service answers: waits while it may still be starting (start_timeout from its
    process's start), then GRACE seconds unless it is broken for sure (an Airflow component's process gone)."""
    starting_until = (svc.started_at() or 0.0) + settings.start_timeout
    grace_until = time.time() + min(GRACE, settings.start_timeout)
    while not svc.healthy():
        now = time.time()
        if not svc.running() or (now >= starting_until and (svc.broken() or now >= grace_until)):
            return False
        time.sleep(0.5)
    return True


def _start(svc: Service, others: list[Service], say: Say) -> None:
    """prepare() and start() svc; when start fails, svc is stopped again and the others are left as they are."""
    say(f"{svc.name}: preparing")
    svc.prepare()
    say(f"{svc.name}: starting")
    try:
        svc.start()
    except BaseException as exc:
        svc.stop()
        if not isinstance(exc, StackError):
            raise
        left = [o.name for o in others if o is not svc and o.ports() and o.running()]
        last_lines = tail(svc.log)
        raise StackError(
            f"{exc}\nstopped {svc.name}"
            + (f"; left running: {', '.join(left)} (run `streamfill stack up` again once the cause is fixed, "
               "or `streamfill stack down`)" if left else "")
            + (f"\nlast lines of {svc.log}:\n{last_lines}" if last_lines else "")) from exc


def up(settings: Settings, say: Say = print) -> list[Status]:
    all_services = services(settings)
    stopped = [s for s in all_services if not s.running()]
    _check_ports(stopped, settings)
    changed = auth_changed = False
    for svc in all_services:
        if svc in stopped:
            _start(svc, all_services, say)
            changed = True
        elif not svc.ports():
            if not svc.healthy():
                svc.start()  # nothing to restart: start() names what is missing
        elif auth_changed and isinstance(svc, Airflow):
            say(f"{svc.name}: restarting it, so that it connects to PostgreSQL with the password")
            svc.stop()
            _start(svc, all_services, say)
        elif not answers(svc, settings):
            say(f"{svc.name}: running (pid {svc.pid()}) but not answering ({svc.problem()}); restarting it")
            svc.stop()
            _start(svc, all_services, say)
            changed = True
        say(f"{svc.name}: up")
        if isinstance(svc, Spark):
            say(f"spark: {svc.prepare()}")
        if isinstance(svc, Postgres):
            if svc not in stopped:  # start() did this for a server it started
                for line in svc.secure():
                    say(f"postgres: {line}")
                    changed = auth_changed = True
            upgrade(settings.offsets_db_url)  # also a stack whose checkout brought new migrations
            if changed:
                say("offsets_db: migrations applied")
    if not changed:
        say("stack already up: nothing to do")
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

"""Services of a test's own, to break without breaking the shared stack: a PostgreSQL it may crash."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from streamfill.cli.stack.postgres import Postgres
from streamfill.settings import Settings


@contextmanager
def private_postgres(stack_settings: Settings, ports: range) -> Iterator[Postgres]:
    """A PostgreSQL of its own on the first free port of `ports`, with offsets_db installed; removed at the end."""
    from streamfill.cli.stack.process import port_free
    from streamfill.offsets_db.migrate import upgrade

    port = next(p for p in ports if port_free(stack_settings.host, p))
    settings = Settings(home=stack_settings.home / f"test-pg-{uuid.uuid4().hex[:8]}", pg_port=port, db_url=None)
    postgres = Postgres(settings)
    postgres.prepare()
    postgres.start()
    try:
        upgrade(settings.offsets_db_url)
        yield postgres
    finally:
        postgres.stop()
        shutil.rmtree(settings.home, ignore_errors=True)


def crash(postgres: Postgres) -> None:
    """`pg_ctl stop -m immediate`: no shutdown checkpoint; recovery empties UNLOGGED tables."""
    postgres._run([postgres._bin("pg_ctl"), "-D", str(postgres.data_dir), "stop", "-m", "immediate", "-w"], "crash")

"""Fixtures of the integration tests that need a service of their own, to break it without breaking the stack."""

from __future__ import annotations

import shutil
import uuid

import pytest

from app.stack.postgres import Postgres
from streamfill.settings import Settings


@pytest.fixture
def private_postgres(stack_settings):
    """A PostgreSQL of its own (the shared one also holds Airflow's metadata, which must not go away)."""
    from app.stack.process import port_free
    from offsets_db.migrate import upgrade

    port = next(p for p in range(stack_settings.pg_port + 100, stack_settings.pg_port + 200)
                if port_free(stack_settings.host, p))
    settings = Settings(home=stack_settings.home / f"test-pg-{uuid.uuid4().hex[:8]}", pg_port=port,
                        db_url=None)
    postgres = Postgres(settings)
    postgres.prepare()
    postgres.start()
    upgrade(settings.offsets_db_url)
    yield postgres
    postgres.stop()
    shutil.rmtree(settings.home, ignore_errors=True)

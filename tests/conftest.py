"""Session fixtures: integration tests use the running local stack and start it when it is not running."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings as hypothesis_settings

from app import stack
from streamfill.settings import Settings

# shared machines: no per-example deadline, a fixed budget of examples
hypothesis_settings.register_profile("streamfill", deadline=None, max_examples=100)
hypothesis_settings.load_profile("streamfill")


ISSUED: list[str] = []  # every name `topic_name` gave out: the session removes what tests made under them


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    """The local stack, up and healthy; stopped again at the end when this session started it. Before that,
    the DAGs, jobs.d files, offsets_db jobs, tables and topics the session's tests made are removed
    (tests/cleanup.py), so the user's DAG list and streamfill page show only the user's jobs."""
    from tests import cleanup

    settings = Settings()
    started = not all(s.healthy for s in stack.status(settings))
    if started:
        stack.up(settings)
    since = cleanup.newest_job_id(settings)
    yield settings
    for line in cleanup.remove_traces(settings, since, ISSUED):
        print(f"removed {line}")
    if started and os.environ.get("STREAMFILL_KEEP_STACK") != "1":
        stack.down(settings)


@pytest.fixture(scope="session")
def bootstrap(stack_settings: Settings) -> str:
    return stack_settings.bootstrap_servers


@pytest.fixture
def topic_name() -> str:
    """A name of the test's own (topic, job, table prefix), removed with what it names at the session's end."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    ISSUED.append(name)
    return name


@pytest.fixture(scope="session")
def spark(stack_settings: Settings):
    """One local SparkSession for the run, with streamfill's data sources registered; its JVM starts as every
    launch's does, with the class archive `stack up` builds (built here when the stack was already up)."""
    from app.stack.spark import Spark
    from connectors.spark import register
    from spark_jobs.session import spark_session

    Spark(stack_settings).prepare()
    session = spark_session("streamfill-tests", stack_settings, {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopTimeout": "30s"})
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def db(stack_settings: Settings):
    """An engine on the stack's offsets_db, for assertions in SQL. Pre-pinged: a test that crashes PostgreSQL
    (test_stack, test_faults) leaves dead connections in the pool for the tests after it."""
    from sqlalchemy import create_engine

    engine = create_engine(stack_settings.offsets_db_url, pool_pre_ping=True)
    yield engine
    engine.dispose()

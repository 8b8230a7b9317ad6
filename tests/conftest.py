"""Session fixtures: integration tests use the running local stack and start it when it is not running."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from streamfill.cli import stack
from streamfill.settings import Settings
from tests import shared_run

# shared machines: no per-example deadline, a fixed budget of examples
hypothesis_settings.register_profile("streamfill", deadline=None, max_examples=100)
hypothesis_settings.load_profile("streamfill")


# The Spark JVMs tests launch live for seconds: C1 alone compiles what they run, on less CPU than tiered
# compilation's C2 spends; set before the stack starts, so the Airflow tasks' launches inherit it too.
if "TieredStopAtLevel" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([os.environ.get("SPARK_SUBMIT_OPTS", ""),
                                                "-XX:TieredStopAtLevel=1"]).strip()

# Every connection of the run to the stack's PostgreSQL (tests, CLI launches, Airflow's metadata, its connection
# and tasks, the page) verifies the server's certificate against the stack's CA, as a team's database would ask.
os.environ.setdefault("STREAMFILL_PG_SSLMODE", "verify-full")

ISSUED: list[str] = []  # every name `topic_name` gave out: the run removes what tests made under them
STATE: dict = {}  # this process's part of the run: whether it started the stack, the newest job id before its tests
REPORTS: list[dict] = []  # the controller's collection of every worker's STATE (tests/shared_run.py)


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        # pyspark.sql.connect (Great Expectations imports it) exits when __main__ has neither a spec nor a file,
        # taking it for a doctest run; an xdist worker's __main__ is execnet's bootstrap, which has neither
        main = sys.modules["__main__"]
        if getattr(main, "__spec__", None) is None and not hasattr(main, "__file__"):
            main.__file__ = str(Path(__file__).with_name("shared_run.py"))
    config.addinivalue_line("markers", f"{shared_run.WHOLE_STACK}: stops, kills or crashes a service of the shared "
                                       "stack or inspects all its processes; runs while no other integration test does")


def pytest_collection_modifyitems(config, items):
    """Tests that drive Airflow form one unit of work (xdist_group "airflow") and come first, as the longest;
    tests that need the whole stack come after the other integration tests, and the unit tests last: they take
    no lock, so another worker runs them while a whole_stack test has the stack."""
    def rank(item) -> int:
        if item.get_closest_marker("xdist_group"):
            return 0
        if item.get_closest_marker(shared_run.WHOLE_STACK):
            return 2
        return 1 if item.get_closest_marker("integration") else 3
    items.sort(key=rank)


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory) -> Settings:
    """The local stack, up and healthy; when this run started it, the run's end stops it again. Before that,
    the DAGs, jobs.d files, offsets_db jobs, tables and topics the run's tests made are removed
    (tests/cleanup.py), so the user's DAG list and streamfill page show only the user's jobs."""
    from tests import cleanup

    settings = Settings()
    with shared_run.one_at_a_time(shared_run.run_dir(tmp_path_factory), "stack"):
        if not all(s.healthy for s in stack.status(settings)):
            stack.up(settings)
            STATE["started"] = True
    STATE["since"] = cleanup.newest_job_id(settings)
    return settings


@pytest.fixture(autouse=True)
def _stack_use(request):
    """Integration tests share the stack; a whole_stack test has it to itself (tests/shared_run.py)."""
    if request.node.get_closest_marker("integration") is None:
        yield
        return
    directory = shared_run.run_dir(request.getfixturevalue("tmp_path_factory"))
    with shared_run.stack_use(directory, request.node.get_closest_marker(shared_run.WHOLE_STACK) is not None):
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    REPORTS.append(getattr(node, "workeroutput", {}).get("streamfill", {}))


def pytest_sessionfinish(session):
    own = {**STATE, "issued": ISSUED}
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["streamfill"] = own
        return
    run = shared_run.merge([own, *REPORTS])
    if run["since"] is None and not run["issued"]:
        return
    from tests import cleanup

    settings = Settings()
    for line in cleanup.remove_traces(settings, run["since"] or 0, run["issued"]):
        print(f"removed {line}")
    if run["started"] and os.environ.get("STREAMFILL_KEEP_STACK") != "1":
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
def spark(stack_settings: Settings, tmp_path_factory):
    """One local SparkSession for the run, with streamfill's data sources registered; its JVM starts as every
    launch's does, with the class archive `stack up` builds (built here when the stack was already up)."""
    from streamfill.cli.stack.spark import Spark
    from streamfill.connectors.spark import register
    from streamfill.spark_jobs.session import spark_session

    with shared_run.one_at_a_time(shared_run.run_dir(tmp_path_factory), "class-archive"):
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

"""offsets_db as the page reads it: as the reader role, through the API server's connection
`streamfill_postgres_reader` (offsets_db/grants.py, docs/infrastructure.md). Without it, through the DAGs' tasks'
connection `streamfill_postgres` (else STREAMFILL_DB_URL), whose role may write: the API server then says so in its
log. Either way every session of the page is read-only. One small pool for the API server's lifetime."""

from __future__ import annotations

import logging
import os
import threading
import time

from sqlalchemy import Engine

from streamfill.errors import StreamfillError
from streamfill.offsets_db import revision
from streamfill.offsets_db.engine import make_engine
from streamfill.orchestration.connections import POSTGRES_READER_CONNECTION, kafka_client, postgres_url
from streamfill.orchestration.endpoints import KAFKA_CONN, POSTGRES_CONN
from streamfill.settings import get_settings

log = logging.getLogger("streamfill.ui")

# the page only reads: PostgreSQL refuses any write of a session started so, whatever its role may do; its
# queries are index lookups over a window, where JIT compiling (planned from a long history's row estimates) only
# adds time
PAGE_SESSION = "-c default_transaction_read_only=on -c jit=off"

_lock = threading.Lock()
_engine: Engine | None = None
REVISION_CHECKED_FOR_S = 10.0
_revision_checked = float("-inf")


class NoDatabase(StreamfillError):
    """Neither an Airflow connection nor its STREAMFILL_* variable says where offsets_db (or the broker) is."""


def _connection(conn_id: str, env_var: str):
    """(the Airflow connection, None), or (None, the value of `env_var`) when Airflow has no such connection."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id), None
    except AirflowNotFoundException:
        if os.environ.get(env_var):
            return None, os.environ[env_var]
        raise NoDatabase(f"no Airflow connection {conn_id!r} and no {env_var}: add the connection (Admin > "
                         f"Connections) or set {env_var} in the API server's environment") from None


def database_url() -> str:
    """The reader's connection; else, with a warning in the log, the workers' one (or STREAMFILL_DB_URL)."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return postgres_url(Connection.get_connection_from_secrets(POSTGRES_READER_CONNECTION))
    except AirflowNotFoundException:
        pass
    pg, url = _connection(POSTGRES_CONN, "STREAMFILL_DB_URL")
    log.warning("the streamfill page reads offsets_db through %s, the role the DAGs' tasks write with (in read-only "
                "sessions): add the connection %s with the reader role (`streamfill db grants`, "
                "docs/infrastructure.md)", POSTGRES_CONN if pg is not None else "STREAMFILL_DB_URL",
                POSTGRES_READER_CONNECTION)
    return url if pg is None else postgres_url(pg)


def kafka() -> dict[str, str]:
    """The cluster the page asks for log ends: the `streamfill_kafka` connection the tasks use, else the
    STREAMFILL_KAFKA_* settings of the API server's environment."""
    conn, _ = _connection(KAFKA_CONN, "STREAMFILL_KAFKA_BOOTSTRAP_SERVERS")
    return get_settings().kafka_client() if conn is None else kafka_client(conn)


def engine() -> Engine:
    """The page's engine, once offsets_db was found at this code's migration revision (asked again after
    REVISION_CHECKED_FOR_S: an upgrade of offsets_db under a running API server is refused on the page too)."""
    global _engine, _revision_checked
    with _lock:
        if _engine is None:
            _engine = make_engine(database_url(), PAGE_SESSION, pool_size=4, max_overflow=4)
        if time.monotonic() - _revision_checked > REVISION_CHECKED_FOR_S:
            revision.require(_engine)
            _revision_checked = time.monotonic()
        return _engine


def use(url: str) -> Engine:
    """Point the page at another database (the benchmark's scratch one)."""
    global _engine, _revision_checked
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine, _revision_checked = make_engine(url, PAGE_SESSION, pool_size=2, max_overflow=2), float("-inf")
        return _engine

"""offsets_db as the page reads it: the same `streamfill_postgres` connection the DAGs' tasks use (so the page
shows what the tasks write), else STREAMFILL_DB_URL. One small pool for the API server's lifetime."""

from __future__ import annotations

import os
import threading

from sqlalchemy import Engine

from offsets_db.engine import make_engine
from orchestration.connections import kafka_client, postgres_url
from orchestration.tasks import KAFKA_CONN, POSTGRES_CONN
from streamfill.errors import StreamfillError
from streamfill.settings import get_settings

_lock = threading.Lock()
_engine: Engine | None = None


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
    pg, url = _connection(POSTGRES_CONN, "STREAMFILL_DB_URL")
    if pg is None:
        return url
    return postgres_url(pg)


def kafka() -> dict[str, str]:
    """The cluster the page asks for log ends: the `streamfill_kafka` connection the tasks use, else the
    STREAMFILL_KAFKA_* settings of the API server's environment."""
    conn, _ = _connection(KAFKA_CONN, "STREAMFILL_KAFKA_BOOTSTRAP_SERVERS")
    return get_settings().kafka_client() if conn is None else kafka_client(conn)


def engine() -> Engine:
    global _engine
    with _lock:
        if _engine is None:
            _engine = make_engine(database_url(), pool_size=4, max_overflow=4)
        return _engine


def use(url: str) -> Engine:
    """Point the page at another database (the benchmark's scratch one)."""
    global _engine
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = make_engine(url, pool_size=2, max_overflow=2)
        return _engine

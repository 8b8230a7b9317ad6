"""offsets_db as the page reads it: the same `streamfill_postgres` connection the DAGs' tasks use (so the page
shows what the tasks write), else STREAMFILL_DB_URL. One small pool for the API server's lifetime."""

from __future__ import annotations

import os
import threading

from sqlalchemy import URL, Engine

from offsets_db.engine import make_engine
from orchestration.tasks import POSTGRES_CONN
from streamfill.errors import StreamfillError

_lock = threading.Lock()
_engine: Engine | None = None


class NoDatabase(StreamfillError):
    """Neither the Airflow connection nor STREAMFILL_DB_URL says where offsets_db is."""


def database_url() -> str:
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        pg = Connection.get_connection_from_secrets(POSTGRES_CONN)
    except AirflowNotFoundException:
        url = os.environ.get("STREAMFILL_DB_URL")
        if url:
            return url
        raise NoDatabase(f"no Airflow connection {POSTGRES_CONN!r} and no STREAMFILL_DB_URL: add the connection "
                         "(Admin > Connections) or set STREAMFILL_DB_URL in the API server's environment") from None
    return URL.create("postgresql+psycopg2", username=pg.login or None, password=pg.password or None,
                      host=pg.host, port=pg.port, database=pg.schema).render_as_string(hide_password=False)


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

"""The sink's way to a PostgreSQL database named by a SQLAlchemy URL: libpq's form of the URL, and a pooled
connection whose failure names the URL without its password and the fix."""

from __future__ import annotations

import psycopg2

from streamfill.connectors.postgres import pool
from streamfill.errors import SinkError
from streamfill.urls import without_password


def dsn(url: str) -> str:
    """libpq's form of a SQLAlchemy URL."""
    from sqlalchemy import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def connect(url: str) -> pool.PooledConnection:
    """A pooled connection to the database at `url` (give it back with pool.release), or a SinkError saying how to
    reach it."""
    from streamfill.pg import connect_args

    try:
        return pool.connect(dsn(url), **connect_args())
    except psycopg2.OperationalError as exc:
        raise SinkError(f"cannot connect to PostgreSQL at {without_password(url)}: {str(exc).strip()}. Start it "
                        "(streamfill stack up) or fix the url option / STREAMFILL_DB_URL") from None

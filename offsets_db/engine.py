"""The one way streamfill opens a SQLAlchemy engine on PostgreSQL: with the timeouts and keepalives of
`streamfill.pg` on every connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import OperationalError

from streamfill.bounded_cache import BoundedCache
from streamfill.errors import OUTAGE, StreamfillError
from streamfill.offsets_db import schema
from streamfill.offsets_db.pooling import startup_refusal
from streamfill.pg import connect_args
from streamfill.urls import without_password


def make_engine(url: str, options: str = "", **kwargs) -> Engine:
    """Its ORM statements name offsets_db's tables in STREAMFILL_DB_SCHEMA (offsets_db.schema); `options` adds
    server settings of the caller's own (streamfill.pg.connect_args)."""
    return create_engine(url, connect_args=connect_args(options), pool_pre_ping=True,
                         execution_options={"schema_translate_map": schema.translate_map()}, **kwargs)


SHARED_ENGINES = 8  # databases a process keeps an engine for; past that the least recently used is disposed


def _shared_engine_for(url: str) -> Engine:
    return make_engine(url, pool_size=2)


def _dispose(_url: str, engine: Engine) -> None:
    engine.dispose()


_shared: BoundedCache[str, Engine] = BoundedCache(SHARED_ENGINES, close=_dispose)


def shared_engine(url: str) -> Engine:
    """One engine per database in this process, for Spark's Python workers that plan or commit batch after
    batch (the source's plans, the sink's commits): each reuses its connection instead of opening one per batch.
    Two pooled connections: a lease keeps one for the launch's life (`fencing.acquire`), the work uses the other."""
    return _shared.get(url, lambda: _shared_engine_for(url))


def dispose_shared() -> None:
    """Close the shared engines' connections (a benchmark dropping its scratch database)."""
    for engine in _shared.values():
        engine.dispose()


class OffsetsDbUnreachable(StreamfillError):
    """offsets_db could not be reached: not the user's input, so the command says where it looked and how to start
    it."""

    kind = OUTAGE

    def __init__(self, url: str, exc: BaseException) -> None:
        reason = " ".join(str(getattr(exc, "orig", exc)).split())
        super().__init__(f"cannot reach offsets_db at {without_password(url)}: {reason}. Start it with `streamfill "
                         "stack up` or set STREAMFILL_DB_URL")


def _driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [psycopg2.OperationalError]
    try:
        import psycopg
    except ImportError:  # psycopg 3 is optional: SQLAlchemy picks it only for postgresql+psycopg URLs
        pass
    else:
        found.append(psycopg.OperationalError)
    return tuple(found)


_DRIVER_UNREACHABLE = _driver_errors()


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` is PostgreSQL refusing or losing the connection, as `reaching` judges it: SQLAlchemy's
    OperationalError, or a raw DBAPI connection's own one without a server's error code (with one, the server
    answered: a timeout, a lock not available)."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, _DRIVER_UNREACHABLE) and not (getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None))


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """A connection refused or lost inside is raised as OffsetsDbUnreachable, naming the database without its
    password; one a pooler refused for streamfill's connection settings, as the refusal that says which setting
    (offsets_db.pooling). A raw DBAPI connection (psycopg2's or psycopg's) raises its driver's own OperationalError."""
    try:
        yield
    except (OperationalError, *_DRIVER_UNREACHABLE) as exc:
        if not unreachable(exc):
            raise  # the server answered (a timeout, a lock not available): not out of reach
        raise startup_refusal(url, exc) or OffsetsDbUnreachable(url, exc) from None

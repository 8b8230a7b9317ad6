"""Whether offsets_db is reached through a connection pooler that shares PostgreSQL sessions between its clients
(PgBouncer's transaction or statement pooling; docs/offsets-db.md, "PgBouncer").

A launch holds its job with a session-level advisory lock for its whole life (offsets_db.fencing). Such a pooler
leaves that lock on a server connection it then hands to other clients, and keeps it there after the launch
crashed, so the job would be held by nobody's launch and never freed. A launch is therefore refused before it
records anything, naming the pooler's setting; session pooling and a direct connection keep one backend per client
for the client's life, which is all the lease needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from streamfill.errors import REFUSAL, StreamfillError
from streamfill.pg import connect_args
from streamfill.urls import without_password

SESSION_POOLING = "pool_mode = session"
IGNORE_OPTIONS = "ignore_startup_parameters = options"
DOCS = 'docs/offsets-db.md, "PgBouncer"'
# each round is three statements; a busy transaction pool can, by chance, give a client its backend back once
ROUNDS = 3
PID = "SELECT pg_backend_pid()"


class PoolingRefused(StreamfillError):
    """offsets_db is reached through a pooler a launch cannot hold its job through, or one that refuses
    streamfill's connections: the message says what was found, where, and the setting that fixes it."""

    kind = REFUSAL


def require_session(engine: Engine) -> None:
    """PoolingRefused unless each client connection to `engine`'s database keeps its PostgreSQL session (its
    backend) from one transaction to the next."""
    url = engine.url.render_as_string(hide_password=True)
    try:
        found = _shared_sessions(lambda: _connect(engine))
    except engine.dialect.loaded_dbapi.Error as exc:
        refusal = startup_refusal(url, exc)
        if refusal is None:
            raise
        raise refusal from None
    if found:
        raise PoolingRefused(
            f"offsets_db at {url} is reached through a connection pooler that shares PostgreSQL sessions between "
            f"its clients (transaction or statement pooling): {found}. A launch holds its job with a session-level "
            "advisory lock for its whole life, which such a pooler hands to other clients and never frees after a "
            f"crash. Give streamfill's database session pooling (PgBouncer: `{SESSION_POOLING}` on its line under "
            "[databases]), or point STREAMFILL_DB_URL (in Airflow, the entry's postgres connection) at PostgreSQL "
            f"directly ({DOCS})")


def startup_refusal(url: str, exc: BaseException) -> PoolingRefused | None:
    """The refusal to raise instead of `exc` when a pooler refused the connection's `options` (streamfill's
    timeouts and keepalives, streamfill.pg), else None."""
    reason = " ".join(str(getattr(exc, "orig", exc)).split())
    if "unsupported" not in reason or "startup parameter" not in reason:
        return None
    return PoolingRefused(
        f"offsets_db at {without_password(url)} refused streamfill's connection: {reason}. A pooler such as "
        "PgBouncer refuses the startup parameter `options`, which carries streamfill's timeouts and keepalives "
        f"(STREAMFILL_PG_*): add `{IGNORE_OPTIONS}` to its [pgbouncer] section and give streamfill's roles those "
        f"timeouts with ALTER ROLE ... SET ({DOCS})")


def _connect(engine: Engine):
    """A DBAPI connection of the engine's driver with streamfill's connection settings, outside its pool: the
    dialect's first-connection queries run in a transaction, which a statement pooler cuts off."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    return engine.dialect.loaded_dbapi.connect(*cargs, **{**cparams, **connect_args()})


def _pid(conn) -> int:
    with conn.cursor() as cur:
        cur.execute(PID)
        return cur.fetchone()[0]


def _shared_sessions(connect: Callable[[], Any]) -> str | None:
    """What shows that two clients share a backend, or None. Client `a` asks for its backend between
    transactions; client `b` then opens a transaction, and `a` asks again. A transaction pooler gives `b` the
    backend `a` just gave back (PgBouncer hands out its most recently used server connection first) or `a`
    another one. One client's backend in two transactions alone would not tell: on a quiet pool it is the same."""
    a, b, cut = connect(), connect(), 0
    try:
        a.autocommit = True
        for _ in range(ROUNDS):
            before = _pid(a)
            try:
                other = _pid(b)  # b's transaction stays open: its backend is b's until the rollback
                if other == before:
                    return f"another client's transaction ran on backend {other}, which this client had a moment before"
                after = _pid(a)
                b.rollback()
            except Exception as exc:
                if not b.closed:
                    raise
                cut += 1  # a statement pooler closes a client that opens a transaction; once could be chance
                if cut == 2:
                    return f"a transaction of two statements was cut off twice ({' '.join(str(exc).split())})"
                b = connect()
                continue
            if after != before:
                return f"this client's statements ran on backend {before}, then on backend {after}"
        return None
    finally:
        for conn in (a, b):
            conn.close()

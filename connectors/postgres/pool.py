"""A process's pool of idle PostgreSQL connections, kept between the calls Spark makes into its reused workers.

Opening a connection for each call would start a new server process (with cold catalog caches) each time; a kept
connection is checked with one round trip instead. Only an idle connection (nothing open, nothing held) is kept,
so no transaction, lock or setting of one call reaches the next.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import psycopg2
from psycopg2 import extensions

KEEP = 2  # idle connections kept per database and process: a commit and the merge it started overlap
DATABASES = 8  # databases a process keeps connections to; the least recently used one's are closed past it


class PooledConnection(extensions.connection):
    """A psycopg2 connection that knows which pool entry it goes back to."""

    key: tuple = ()


_idle: OrderedDict[tuple, list[PooledConnection]] = OrderedDict()
_lock = threading.Lock()


def _key(conninfo: str, kw: dict) -> tuple:
    # the pid: a forked child must never use (or close, which ends the session) its parent's connections
    return os.getpid(), conninfo, tuple(sorted(kw.items()))


def connect(conninfo: str, **kw) -> PooledConnection:
    """A pooled connection to this database that still answers, else a new one (psycopg2.connect's errors)."""
    key = _key(conninfo, kw)
    while True:
        with _lock:
            idle = _idle.get(key)
            conn = idle.pop() if idle else None
        if conn is None:
            conn = psycopg2.connect(conninfo, connection_factory=PooledConnection, **kw)
            conn.key = key
            return conn
        try:
            conn.autocommit = True  # the check opens no transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            conn.autocommit = False
            return conn
        except psycopg2.Error:  # the server ended it (a restart, an idle timeout): try the next one
            conn.close()


def release(conn) -> None:
    """Keep `conn` for the next call if it is idle and there is room, else close it. Use instead of close()."""
    key = getattr(conn, "key", ())
    if key and key[0] != os.getpid():
        return  # inherited through a fork: closing it would end the parent's session
    evicted: list[PooledConnection] = []
    kept = False
    if not conn.closed and key and conn.get_transaction_status() == extensions.TRANSACTION_STATUS_IDLE:
        with _lock:
            idle = _idle.setdefault(key, [])
            _idle.move_to_end(key)
            if len(idle) < KEEP:
                idle.append(conn)
                kept = True
            while len(_idle) > DATABASES:
                old_key, old = _idle.popitem(last=False)
                if old_key[0] == os.getpid():  # a parent's are only forgotten, never closed
                    evicted += old
    for old_conn in evicted:
        old_conn.close()
    if not kept:
        conn.close()


def close_all() -> None:
    """Close this process's pooled connections (a test that starts from none)."""
    with _lock:
        conns = [c for k, v in _idle.items() if k[0] == os.getpid() for c in v]
        for k in [k for k in _idle if k[0] == os.getpid()]:
            del _idle[k]
    for conn in conns:
        conn.close()

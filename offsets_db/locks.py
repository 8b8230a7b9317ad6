"""Waiting for a lock without failing and without making others wait: the commit's and the launch's policy.

A statement that needs a lock someone else holds (a colleague's CREATE INDEX on the target, another commit of
the job) is tried with a short lock_timeout inside a savepoint, and tried again after a pause, for as long as
it takes: the batch never fails because of someone else's lock, and while a request is queued, requests that
conflict with it queue behind it for one try at most. The wait is logged with who holds the lock.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence

import psycopg2.errors
from psycopg2 import sql

log = logging.getLogger("streamfill.locks")

TRY = "1s"  # one try's lock_timeout: the longest a request of ours keeps conflicting requests queued behind it
# a try for a lock every reader of the table conflicts with (ALTER TABLE's ACCESS EXCLUSIVE): readers that come
# while it is queued wait behind it, so it gives up within tens of milliseconds and asks again after a pause
SHORT_TRY = "50ms"
PAUSE_S = (0.5, 2.0)  # between tries, so what queued behind a try runs
REPORT_EVERY_S = 30.0
# pg_locks shows the locks of every database of the server, and advisory keys and table oids repeat across them (a
# copy made with CREATE DATABASE ... TEMPLATE has the same job ids and oids): a reader keeps its own database's
THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"

# who holds locks on a table that conflict with a mode (PostgreSQL's conflict table, per requested mode)
CONFLICTS = {
    "ROW EXCLUSIVE": ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"),
    "ACCESS EXCLUSIVE": ("AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
                         "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"),
}


def wait_for_lock(cur, statement: sql.Composable | str, params: Sequence = (), *, what: str,
                  holders: Callable[[object], list[str]] | None = None, sleep: Callable[[float], None] = time.sleep,
                  attempt: str = TRY) -> float:
    """Run `statement`, which takes a lock, inside the caller's transaction, trying until it gets the lock;
    returns the seconds waited. The transaction's own lock_timeout applies again afterwards (a later statement,
    such as an insert waiting for another writer of the same key, keeps the usual bound). `holders(cur)`
    describes who holds the lock, for the log; `attempt` is one try's lock_timeout."""
    started = time.monotonic()
    reported = started
    while True:
        cur.execute("SAVEPOINT sf_lock")
        cur.execute("SELECT current_setting('lock_timeout')")
        before = cur.fetchone()[0]
        cur.execute("SELECT set_config('lock_timeout', %s, true)", (attempt,))
        try:
            cur.execute(statement, params)
        except psycopg2.errors.LockNotAvailable:
            cur.execute("ROLLBACK TO SAVEPOINT sf_lock")  # also undoes the lock_timeout set above
        else:
            cur.execute("SELECT set_config('lock_timeout', %s, true)", (before,))
            cur.execute("RELEASE SAVEPOINT sf_lock")
            waited = time.monotonic() - started
            if waited >= REPORT_EVERY_S:
                log.warning("%s: got the lock after %.0f s", what, waited)
            return waited
        now = time.monotonic()
        if now - reported >= REPORT_EVERY_S:
            reported = now
            who = holders(cur) if holders else []
            log.warning("%s: waiting for a lock for %.0f s%s", what, now - started,
                        f"; held by {'; '.join(who)}" if who else "")
        sleep(random.uniform(*PAUSE_S))


def table_holders(schema: str, table: str, mode: str) -> Callable[[object], list[str]]:
    """For wait_for_lock's log: the sessions holding a lock on schema.table that conflicts with `mode`."""
    def holders(cur) -> list[str]:
        cur.execute(_HOLDERS + """
            WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
              AND l.database = """ + THIS_DATABASE + """ AND l.relation = to_regclass(%s) AND l.mode = ANY(%s)""",
                    (sql.Identifier(schema, table).as_string(cur), list(CONFLICTS[mode])))
        return _described(cur.fetchall())
    return holders


def advisory_holders(space: int, key: int | str) -> Callable[[object], list[str]]:
    """For wait_for_lock's log: the sessions holding the transaction-level advisory lock (space, key), a text key
    being taken as pg_advisory_xact_lock(space, hashtext(key)) takes it."""
    # pg_locks shows a two-key advisory lock's keys as oids (unsigned): a negative hashtext wraps around
    objid = "((hashtext(%s)::bigint + 4294967296) %% 4294967296)::oid" if isinstance(key, str) else "%s::oid"

    def holders(cur) -> list[str]:
        cur.execute(_HOLDERS + """
            WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
              AND l.database = """ + THIS_DATABASE + """ AND l.classid = %s::oid AND l.objid = """ + objid + """
              AND l.objsubid = 2""", (space, key))
        return _described(cur.fetchall())
    return holders


_HOLDERS = """
    SELECT a.pid, l.mode, coalesce(a.usename::text, '?'), a.state,
           extract(epoch FROM now() - coalesce(a.xact_start, a.query_start))::int, left(a.query, 120)
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"""


def _described(found: list[tuple]) -> list[str]:
    return [f"pid {pid} ({user}, {mode}, {state} for {age} s: {query!r})"
            for pid, mode, user, state, age, query in found]

"""Who may write a job (docs/guarantees.md): one launch at a time, checked in the transaction
of every plan and commit.

A launch takes its job with `acquire`: a session-level advisory lock on a connection it keeps for its whole
life (a crash, a kill or a lost connection ends the session and frees the job), and a new generation in
`job_leases`. Plans and commits carry that generation; `check`, called inside their transaction with the lease
row locked for share, refuses a generation that is no longer the job's. So a launch that lost its job (its
session died and another launch took over) can never plan or commit again, even while its process lives.

A second launch is refused with the holder's run id, host, pid and how long it has held the job, or waits
for the holder to end (`wait_s`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Connection, Engine, exists, func, literal_column, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from streamfill.errors import Fenced, JobBusy
from streamfill.offsets_db import schema
from streamfill.offsets_db.locks import THIS_DATABASE
from streamfill.offsets_db.models import JobLease

log = logging.getLogger("streamfill.fencing")

LOCK_SPACE = 0x5F11  # the advisory-lock key space of streamfill jobs: pg_advisory_lock(LOCK_SPACE, job id)


@dataclass(frozen=True)
class Holder:
    """The launch holding a job, as job_leases and pg_locks show it."""

    generation: int
    run_id: int | None
    host: str
    pid: int
    acquired_at: datetime
    alive: bool  # its session still holds the advisory lock

    def describe(self) -> str:
        held = datetime.now(timezone.utc) - self.acquired_at
        run = f"run {self.run_id}" if self.run_id is not None else "a launch without a run row"
        return (f"{run} on host {self.host}, pid {self.pid}, for {_age(held.total_seconds())} (since "
                f"{self.acquired_at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, generation {self.generation})")


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}h {s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


def _lock_held(job_id: int):
    """True while some session holds the job's advisory lock."""
    return exists(select(literal_column("1")).select_from(text("pg_locks")).where(
        text(f"locktype = 'advisory' AND database = {THIS_DATABASE} AND classid = :space AND objid = :job_id "
             "AND objsubid = 2 AND granted")
        .bindparams(space=LOCK_SPACE, job_id=job_id)))


def holder(s: Session | Connection, job_id: int) -> Holder | None:
    row = s.execute(select(JobLease.generation, JobLease.run_id, JobLease.host, JobLease.pid,
                           JobLease.acquired_at, _lock_held(job_id)).where(JobLease.job_id == job_id)).first()
    return None if row is None else Holder(*row)


def held_sql(job_id: str) -> str:
    """SQL that is true while a session of this database holds the advisory lock of the job whose id is the SQL
    expression `job_id` (a live launch): for statements written as text."""
    return (f"EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.classid = {LOCK_SPACE} "
            f"AND k.objid::bigint = {job_id} AND k.objsubid = 2 AND k.granted AND k.database = {THIS_DATABASE})")


def launch_alive(cur, job: str, generation: int) -> bool:
    """On a DB-API cursor (the sink's sweep of staging tables): whether the launch of `job` that took it with
    `generation` still holds it, its session keeping the job's advisory lock."""
    hold = live_hold(cur, job)
    return hold is not None and hold[0] == generation


def live_hold(cur, job: str) -> tuple[int, datetime] | None:
    """On a DB-API cursor (the sweep of staging tables): the generation and acquisition time of the launch of
    `job` alive now, None when no launch holds it."""
    cur.execute(schema.sql("SELECT l.generation, l.acquired_at FROM {job_leases} l JOIN {jobs} j ON j.id = l.job_id "
                           "WHERE j.name = %s AND " + held_sql("l.job_id")), (job,))
    row = cur.fetchone()
    return None if row is None else (int(row[0]), row[1])


def streams_holding(conn: Connection) -> list[str]:
    """Each stream launch that holds its job now, described (job, run, host, pid, since): an upgrade of offsets_db
    under them is refused unless asked for. Empty before offsets_db has leases (an install older than them)."""
    if not conn.scalar(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": schema.qualified("job_leases")}):
        return []
    rows = conn.execute(text(schema.sql("""
        SELECT j.name, l.generation, l.run_id, l.host, l.pid, l.acquired_at
        FROM {job_leases} l JOIN {jobs} j ON j.id = l.job_id
        WHERE j.kind = 'stream' AND """ + held_sql("l.job_id") + " ORDER BY j.name"))).all()
    return [f"{name}: " + Holder(generation, run_id, host, pid, acquired_at, True).describe()
            for name, generation, run_id, host, pid, acquired_at in rows]


def run_of(s: Session, job_id: int, generation: int) -> int | None:
    """The `runs` row of the launch that holds the job with this generation (None before it has one)."""
    return s.scalar(select(JobLease.run_id).where(JobLease.job_id == job_id, JobLease.generation == generation))


class Lease:
    """A launch's hold on its job: keep it for the launch's whole life, release it (or exit) at the end."""

    def __init__(self, job: str, job_id: int, generation: int, conn: Connection) -> None:
        self.job, self.job_id, self.generation, self._conn = job, job_id, generation, conn

    def set_run(self, run_id: int) -> None:
        """Name the launch's `runs` row, so a refused launch can tell who holds the job."""
        self._conn.execute(update(JobLease).where(JobLease.job_id == self.job_id,
                                                  JobLease.generation == self.generation).values(run_id=run_id))
        self._conn.commit()

    def release(self) -> None:
        """Unlock and close the session. The generation stays, so nothing of this launch can commit after
        another launch takes the job."""
        if self._conn is not None:
            try:
                self._conn.rollback()
                self._conn.scalar(select(func.pg_advisory_unlock(LOCK_SPACE, self.job_id)))  # now, not at exit
                self._conn.commit()
            except DBAPIError:
                pass  # the session is gone already, and the lock with it
            finally:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(engine: Engine, job: str, job_id: int, *, wait_s: float = 0, run_id: int | None = None,
            wait_hint: str = "", on_wait: Callable[[Holder], None] | None = None) -> Lease:
    """Take the job for this launch, or raise JobBusy naming the holder; with `wait_s`, wait up to that long
    for the holder to end (`on_wait` is told who is waited for, about every 30 s)."""
    conn = engine.connect()
    conn.detach()  # its own session, never returned to a pool while it holds the lock
    try:
        deadline = time.monotonic() + wait_s
        told = 0.0
        while not conn.scalar(select(func.pg_try_advisory_lock(LOCK_SPACE, job_id))):
            conn.rollback()
            busy = holder(conn, job_id)
            conn.rollback()
            if time.monotonic() >= deadline:
                raise JobBusy(_busy_message(job, busy, wait_s, wait_hint))
            if on_wait is not None and busy is not None and time.monotonic() - told >= 30:
                on_wait(busy)
                told = time.monotonic()
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        conn.commit()  # the session-level lock stays; the transaction does not
        conn.execute(text("SET LOCAL lock_timeout = 0"))  # a commit in flight holds the lease row; let it finish
        stmt = insert(JobLease).values(job_id=job_id, generation=1, run_id=run_id, host=socket.gethostname(),
                                       pid=os.getpid(), backend_pid=func.pg_backend_pid(), acquired_at=func.now())
        generation = conn.scalar(stmt.on_conflict_do_update(
            index_elements=[JobLease.job_id],
            set_={"generation": JobLease.generation + 1, "run_id": stmt.excluded.run_id, "host": stmt.excluded.host,
                  "pid": stmt.excluded.pid, "backend_pid": stmt.excluded.backend_pid,
                  "acquired_at": stmt.excluded.acquired_at}).returning(JobLease.generation))
        conn.commit()
    except BaseException:
        conn.close()
        raise
    log.info("job %s: held by this launch (generation %d, host %s, pid %d)", job, generation,
             socket.gethostname(), os.getpid())
    return Lease(job, job_id, generation, conn)


def _busy_message(job: str, busy: Holder | None, waited_s: float, wait_hint: str) -> str:
    who = busy.describe() if busy is not None else "a launch that has not recorded itself yet"
    waited = f" after waiting {_age(waited_s)}" if waited_s else ""
    hint = f", or let this launch wait for it ({wait_hint})" if wait_hint and not waited_s else ""
    return (f"job {job!r} is held by another launch{waited}: {who}. One launch of a job plans and commits at a "
            f"time; wait for that launch to end, stop it (it runs on host "
            f"{busy.host if busy else '?'} as pid {busy.pid if busy else '?'}){hint}")


def check(s: Session, job: str, job_id: int, generation: int | None, *, refuse_live_holder: bool) -> int | None:
    """Inside a plan's or commit's transaction: refuse a launch that no longer holds the job. Returns the job's
    current generation (None for a job never held). The lease row stays locked for share until the caller's
    transaction ends, so no other launch takes the job in between.

    Without a generation (a caller that did not acquire the job), `refuse_live_holder` refuses a job a live
    launch holds (a plan); a commit instead compares the batch's generation with the returned one."""
    row = s.execute(select(JobLease.generation).where(JobLease.job_id == job_id).with_for_update(read=True)).first()
    current = None if row is None else row[0]
    if generation is not None and current != generation:
        now = holder(s, job_id)
        raise Fenced(f"this launch of job {job!r} (generation {generation}) no longer holds the job: "
                     f"{'it is now held by ' + now.describe() if now else 'the job has no holder'}. Nothing of "
                     "this launch is committed; the holder plans the job's next batch again from its snapshot")
    if generation is None and refuse_live_holder and current is not None:
        now = holder(s, job_id)
        if now is not None and now.alive:
            raise JobBusy(_busy_message(job, now, 0, ""))
    return current

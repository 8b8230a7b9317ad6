"""The staging table: where a batch's tasks COPY their rows before the commit moves them into the target.

One per (target, owner, column shape): a stream's job writes its batches one after another into one, a single
write (a backfill chunk, a df.write) has one of its own. UNLOGGED for speed: a crash of PostgreSQL empties it,
and the commit's count of staged rows catches that. Its comment says whose it is, so the stage of a write whose
driver died is dropped by a later write (`sweep_orphans`), never one a live launch may still commit.
Identifiers are quoted with psycopg2.sql; values are bound parameters.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg2.errors
from psycopg2 import sql

from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.copy import WRITE_ID
from streamfill.connectors.postgres.sink_options import DEAD_LETTER_COLUMNS, KAFKA_COORDINATES
from streamfill.connectors.postgres.target import Target, existing_columns

log = logging.getLogger("streamfill.postgres_stage")

STAGE_PREFIX = "_sf_stage_"
STREAM, WRITE = "stream", "write"  # a stream job's stage (kept, emptied); a single write's (dropped after it)


@dataclass(frozen=True)
class Stage:
    """A write's two staging tables: its valid rows, in the target's columns, and (with dead letters on) its
    dead letters, apart, so neither the commit's insert nor its move of dead letters reads the other's rows."""

    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, type) as binary COPY writes them, the write id last
    dead_letters: bool
    dead_columns: tuple[tuple[str, str], ...] = ()  # the dead letters' table: Kafka coordinates, _error, _raw
    # (schema, table): a routed write's later tables keep their dead letters in its first table's stage
    shared_dead: tuple[str, str] | None = None

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.name)

    @property
    def dead_name(self) -> str:
        return self.shared_dead[1] if self.shared_dead else f"{self.name}_d"

    @property
    def dead_ident(self) -> sql.Composable:
        return sql.Identifier(self.shared_dead[0] if self.shared_dead else self.schema, self.dead_name)

    @property
    def names(self) -> list[str]:
        """The columns a task COPYs, in order, without the write id (copy.encode appends it)."""
        return [n for n, _ in self.columns if n != WRITE_ID]

    @property
    def dead_names(self) -> list[str]:
        return [n for n, _ in self.dead_columns if n != WRITE_ID]

    @property
    def tables(self) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
        own_dead = self.dead_letters and self.shared_dead is None
        return [(self.name, self.columns)] + ([(self.dead_name, self.dead_columns)] if own_dead else [])


def stage_name(schema: str, table: str, owner: str, shape: str = "") -> str:
    digest = hashlib.sha1(f"{schema}.{table}|{owner}|{shape}".encode()).hexdigest()[:16]
    return f"{STAGE_PREFIX}{table[:30]}_{digest}"


def stage_for(target: Target, owner: str, dead_letters: bool, extra: tuple[tuple[str, str], ...] = (),
              shared_dead: Stage | None = None) -> Stage:
    """The stage of `owner` (a stream's job name, or a single write's own id) for the target's columns and the
    `extra` columns the commit reads but the table never gets (_delete); with `shared_dead`, its dead letters go
    to that stage's dead-letter table."""
    columns = (*((c.name, c.stage_type) for c in target.columns), *extra, (WRITE_ID, "text"))
    types = dict(columns)
    dead = (*((n, types[n]) for n in KAFKA_COORDINATES), *DEAD_LETTER_COLUMNS, (WRITE_ID, "text")) \
        if dead_letters else ()
    shape = ",".join(f"{c.name}:{c.pg_type}:{c.stage_type}" for c in target.columns) + (
        "|dead-letters" if dead_letters else "") + "".join(f"|{n}:{t}" for n, t in extra)
    return Stage(target.schema, stage_name(target.schema, target.table, owner, shape), columns, dead_letters, dead,
                 (shared_dead.schema, shared_dead.dead_name) if shared_dead is not None and dead_letters else None)


def create(conn, stage: Stage, target: Target, kind: str, sweep_after_s: float, job: str | None = None,
           generation: int | None = None) -> None:
    """Create the stage's tables (their columns typed as binary COPY writes them, `Column.stage_type`) after
    sweeping the schema's orphans. Each one's comment names the target, the kind, the job and generation of a
    job's write, and when it was made."""
    about = {"streamfill_stage": kind, "target": f"{target.schema}.{target.table}", "created": time.time()}
    if job is not None and generation is not None:
        about.update(job=job, generation=generation)
    with conn.cursor() as cur:
        sweep_orphans(cur, stage.schema, sweep_after_s)
        for name, columns in stage.tables:
            ident = sql.Identifier(stage.schema, name)
            staged = existing_columns(cur, stage.schema, name)
            if staged and [(n, normal_type(t)) for n, t in staged.items()] != [(n, normal_type(t))
                                                                               for n, t in columns]:
                # a stage made by an older version (other columns) is replaced
                cur.execute(sql.SQL("DROP TABLE {}").format(ident))
            # truncated after every commit: statistics and autovacuum would only compete with the commits
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({}) WITH (autovacuum_enabled = false)")
                        .format(ident, sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
                                                          for n, t in columns)))
            cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(ident, sql.Literal(json.dumps(about))))
    conn.commit()


def _stages(cur, schema: str | None = None) -> list[tuple[str, str, dict]]:
    """(schema, table, its comment read as JSON) of every staging table (of one schema, when given)."""
    cur.execute("""
        SELECT n.nspname::text, c.relname::text, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND c.relname LIKE %s AND (%s::text IS NULL OR n.nspname = %s) ORDER BY 1, 2""",
                (STAGE_PREFIX.replace("_", r"\_") + "%", schema, schema))
    found = []
    for in_schema, name, comment in cur.fetchall():
        try:
            found.append((in_schema, name, json.loads(comment or "{}")))
        except ValueError:
            continue
    return found


def _drop(cur, schema: str, name: str, tolerated: tuple[type[Exception], ...]) -> bool:
    """Drop one stage in a savepoint, waiting at most a second for its lock; False (and nothing dropped) when
    someone is using it right now or one of `tolerated` refuses it: it is left for the next sweep."""
    cur.execute("SAVEPOINT sf_sweep")
    try:
        cur.execute("SET LOCAL lock_timeout = '1s'")
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
        cur.execute("RELEASE SAVEPOINT sf_sweep")
        return True
    except (psycopg2.errors.LockNotAvailable, *tolerated):
        cur.execute("ROLLBACK TO SAVEPOINT sf_sweep")
        return False


def sweep_orphans(cur, schema: str, older_than_s: float) -> list[str]:
    """Drop the schema's stages of single writes (kind `write`) whose driver died: made more than
    `older_than_s` ago and, for a job's write, whose launch no longer holds the job (a live launch may still
    commit its stage, however old). A stream's stage is never swept, nor one another session is using."""
    from streamfill.offsets_db.fencing import launch_alive

    dropped = []
    for _, name, about in _stages(cur, schema):
        if about.get("streamfill_stage") != WRITE or time.time() - float(about.get("created", 0)) < older_than_s:
            continue
        if "job" in about and launch_alive(cur, str(about["job"]), int(about["generation"])):
            continue
        if _drop(cur, schema, name, ()):
            dropped.append(name)
    if dropped:
        log.warning("schema %s: dropped %d staging table(s) of writes whose driver died: %s", schema, len(dropped),
                    ", ".join(dropped))
    return dropped


STARTING_S = 600.0  # a launch this young may not have refreshed its stage's comment yet


def unused_stream_stages(cur, older_than_s: float) -> list[tuple[str, str, dict]]:
    """(schema, table, its comment) of each stream stage no running launch uses, made more than `older_than_s`
    ago: its job is held by no live launch, or by one (older than `STARTING_S`) that made another stage (the
    entry's columns changed, so its stage's name did). A dropped stage of a job that runs again is made again."""
    from streamfill.offsets_db.fencing import live_hold

    unused = []
    for schema, name, about in _stages(cur):
        if about.get("streamfill_stage") != STREAM or "job" not in about or \
                time.time() - float(about.get("created", 0)) < older_than_s:
            continue
        hold = live_hold(cur, str(about["job"]))
        if hold is not None and (hold[0] == int(about.get("generation", -1))
                                 or time.time() - hold[1].timestamp() < STARTING_S):
            continue
        unused.append((schema, name, about))
    return unused


def drop_unused(cur, schema: str, name: str) -> bool:
    """Drop one unused stage unless someone is using it right now or it is another role's (left for the next
    sweep)."""
    return _drop(cur, schema, name, (psycopg2.errors.InsufficientPrivilege,))


def count(cur, stage: Stage, write_ids: Sequence[str], dead_only: bool = False) -> int:
    """Rows staged under these writes (valid rows and dead letters alike, or the dead letters alone)."""
    total = 0
    for name, _ in stage.tables[1:] if dead_only else stage.tables:
        cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE {} = ANY(%s)").format(
            sql.Identifier(stage.schema, name), sql.Identifier(WRITE_ID)), (list(write_ids),))
        total += cur.fetchone()[0]
    return total


def discard(cur, stage: Stage, write_ids: Sequence[str] | None = None) -> None:
    """Remove staged rows: the named writes, or every staged row of the stage."""
    for name, _ in stage.tables:
        ident = sql.Identifier(stage.schema, name)
        if write_ids is None:
            # TRUNCATE, not DELETE: a stage of millions of dead rows would slow every later COPY and move. It
            # waits for a straggling task attempt's COPY to finish; batches of one job never overlap otherwise.
            cur.execute(sql.SQL("TRUNCATE {}").format(ident))
        else:
            cur.execute(sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(ident, sql.Identifier(WRITE_ID)),
                        (list(write_ids),))


def drop(cur, stage: Stage) -> None:
    for name, _ in stage.tables:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(stage.schema, name)))

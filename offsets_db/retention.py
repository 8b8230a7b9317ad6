"""Pruning offsets_db's history at the ages of `streamfill.retention_ages.Retention` (docs/operations.md#retention).

What a job needs is never removed: its newest committed batch and every batch a snapshot row points at (where it
resumes, and what `latest_offsets` shows), its lease, its newest run and quality result, its newest announcement
(where its announcer stands) and, once it has announced, every commit not yet announced. A job a live launch
holds loses no uncommitted batch and no window job is removed while held.

Deletes go per job and kind, in chunks of `chunk` rows, each in its own short transaction whose rows are taken
with SKIP LOCKED and whose locks wait at most `lock_timeout`: a commit never waits on a prune for longer than one
chunk, and a prune that meets a lock gives way and goes on with the next job. Before a job's dead letters go,
its horizon (`retention_horizons`) moves first, so a whole-table quality check running meanwhile reconciles only
batches whose dead letters are all still there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import psycopg2.errors
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from streamfill.errors import UnknownJob
from streamfill.names import window_jobs_like
from streamfill.offsets_db import deleted_keys, schema
from streamfill.offsets_db.fencing import held_sql
from streamfill.partitions import TopicPartition
from streamfill.retention_ages import Retention

CHUNK = 500
LOCK_TIMEOUT = "1s"

_LIVE = held_sql("j.id")  # a live launch holds the job


@dataclass(frozen=True)
class Rule:
    """One kind of row a prune removes: which table, which of a job's rows (`:job`, `:cutoff`), and the age."""

    kind: str  # the Retention field whose age applies
    what: str  # as the report says it
    table: str
    where: str  # of the table's alias `t`, for job `:job` (alias `j`), older than `:cutoff`
    key: str = "id"


RULES: tuple[Rule, ...] = (
    Rule("history", "committed batches (with their offsets)", "batches", """
        t.job_id = :job AND t.committed_at < :cutoff
        AND EXISTS (SELECT 1 FROM {batches} n WHERE n.job_id = t.job_id AND n.seq > t.seq
                    AND n.committed_at IS NOT NULL)
        AND NOT EXISTS (SELECT 1 FROM {snapshots} s WHERE s.batch_id = t.id)
        AND NOT (EXISTS (SELECT 1 FROM {announcements} a WHERE a.job_id = t.job_id)
                 AND t.commit_no > (SELECT coalesce(max(a.last_commit), 0) FROM {announcements} a
                                    WHERE a.job_id = t.job_id AND a.delivered_at IS NOT NULL))"""),
    Rule("history", "batches planned and never committed", "batches", """
        t.job_id = :job AND t.committed_at IS NULL AND t.planned_at < :cutoff AND NOT """ + _LIVE + """
        AND EXISTS (SELECT 1 FROM {batches} n WHERE n.job_id = t.job_id AND n.seq > t.seq)"""),
    Rule("history", "data-loss events", "data_loss_events", """
        t.job_id = :job AND t.detected_at < :cutoff
        AND NOT EXISTS (SELECT 1 FROM {batches} b WHERE b.id = t.batch_id AND b.committed_at IS NULL)"""),
    Rule("history", "ended runs", "runs", """
        t.job_id = :job AND t.started_at < :cutoff AND coalesce(t.ended_at, t.started_at) < :cutoff
        AND EXISTS (SELECT 1 FROM {runs} n WHERE n.job_id = t.job_id AND n.id > t.id)
        AND NOT EXISTS (SELECT 1 FROM {batches} b WHERE b.run_id = t.id)
        AND NOT EXISTS (SELECT 1 FROM {job_leases} l WHERE l.run_id = t.id)"""),
    Rule("dead_letters", "dead letters", "dead_letters", "t.job_id = :job AND t.created_at < :cutoff"),
    Rule("quality_results", "quality results", "quality_results", """
        t.job_id = :job AND t.checked_at < :cutoff
        AND EXISTS (SELECT 1 FROM {quality_results} n WHERE n.job_id = t.job_id AND n.id > t.id)"""),
    Rule("announcements", "delivered announcements", "announcements", """
        t.job_id = :job AND t.delivered_at < :cutoff
        AND EXISTS (SELECT 1 FROM {announcements} n WHERE n.job_id = t.job_id AND n.seq > t.seq)"""),
)
WINDOWS_WHAT = "interval windows' jobs"
DELETED_KEYS_WHAT = "deleted keys whose records Kafka no longer holds"
# an interval window's whole job (its batches, runs, dead letters, ... go with it), after its last activity
WINDOW_JOBS = """
    j.kind <> 'stream' AND j.name LIKE '""" + window_jobs_like() + """' AND NOT """ + _LIVE + """
    AND greatest(j.created_at, coalesce((SELECT max(b.planned_at) FROM {batches} b WHERE b.job_id = j.id),
                                         j.created_at)) < :cutoff"""


@dataclass(frozen=True)
class Removed:
    kind: str
    what: str
    rows: int


Progress = Callable[[str], None]


class KafkaLog(Protocol):
    """What a prune asks Kafka of the records that made deletes (`connectors.kafka.broker.Broker` answers it)."""

    def topics(self) -> Mapping[str, int]: ...

    def watermarks(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, tuple[int, int]]: ...

    def holds(self, offsets: Mapping[TopicPartition, Sequence[int]]) -> set[tuple[TopicPartition, int]]: ...


def prune(engine: Engine, retention: Retention, *, apply: bool, jobs: Sequence[str] | None = None,
          now: datetime | None = None, chunk: int = CHUNK, progress: Progress = lambda line: None,
          kafka: KafkaLog | None = None) -> list[Removed]:
    """What is older than its age, per kind: counted (apply False, nothing changes) or removed; of every job, or
    of the jobs named. `now` is PostgreSQL's clock unless given. A deleted key goes only once `kafka` no longer
    holds the record that made it (none without `kafka`)."""
    with engine.connect() as conn:
        now = now or conn.scalar(text("SELECT now()"))
        found = conn.execute(text(schema.sql("SELECT id, name FROM {jobs} ORDER BY id"))).all()
    if jobs is not None and (unknown := sorted(set(jobs) - {name for _, name in found})):
        raise UnknownJob(f"no job named {', '.join(map(repr, unknown))} is in offsets_db: check the name (the "
                         "streamfill page lists every job, as does the jobs table)")
    named = jobs is not None
    jobs = [(job_id, name) for job_id, name in found if jobs is None or name in jobs]
    cutoffs = {kind: None if (age := getattr(retention, kind)) is None else now - age for kind in Retention.kinds()}
    totals = {("windows", WINDOWS_WHAT): 0, **{(rule.kind, rule.what): 0 for rule in RULES},
              ("deleted_keys", DELETED_KEYS_WHAT): 0}
    whole: set[int] = set()
    if cutoffs["windows"] is not None:
        whole, n = _window_jobs(engine, cutoffs["windows"], {job_id for job_id, _ in jobs}, apply, progress)
        totals[("windows", WINDOWS_WHAT)] = n
    for job_id, name in jobs:
        if job_id in whole:
            continue
        for rule in RULES:
            cutoff = cutoffs[rule.kind]
            if cutoff is None:
                continue
            n = _apply_rule(engine, rule, job_id, cutoff, chunk) if apply else _count(engine, rule, job_id, cutoff)
            if n:
                progress(f"{name}: {'removed' if apply else 'would remove'} {n:,} {rule.what}")
            totals[(rule.kind, rule.what)] += n
    if cutoffs["quality_results"] is not None and not named:
        n = _jobless_results(engine, cutoffs["quality_results"], apply, chunk)
        if n:
            progress(f"{'removed' if apply else 'would remove'} {n:,} quality results of no job (a window's job "
                     "pruned, or a check without a job)")
        totals[("quality_results", "quality results")] += n
    if cutoffs["deleted_keys"] is not None:
        if kafka is None:
            progress("deleted keys kept: no Kafka client was given to ask which of their records Kafka still holds")
        else:
            totals[("deleted_keys", DELETED_KEYS_WHAT)] = _deleted_keys(
                engine, cutoffs["deleted_keys"], kafka, [job_id for job_id, _ in jobs] if named else None, apply,
                chunk, progress)
    return [Removed(kind, what, n) for (kind, what), n in totals.items()]


def _deleted_keys(engine: Engine, cutoff: datetime, kafka: KafkaLog, job_ids: list[int] | None, apply: bool,
                  chunk: int, progress: Progress) -> int:
    """The deletes recorded before `cutoff` whose records Kafka no longer holds (`deleted_keys.left_kafka`),
    weighed `chunk` at a time: counted, or removed in a short transaction per chunk."""
    partitions = {TopicPartition(topic, p) for topic, n in kafka.topics().items() for p in range(n)}
    per_table: dict[str, int] = {}
    after = None
    raw = engine.raw_connection()
    try:
        while True:
            with raw.cursor() as cur:
                found = deleted_keys.recorded_before(cur, cutoff, after, job_ids, chunk)
            raw.rollback()
            if not found:
                break
            after = found[-1]
            known = sorted({r.at for r in found if r.at in partitions})
            starts = {tp: low for tp, (low, _) in kafka.watermarks(known).items()}
            held = kafka.holds({tp: [r.offset for r in found if r.at == tp and r.offset >= starts[tp]]
                                for tp in known})
            gone = deleted_keys.left_kafka(found, partitions, starts, held)
            tables = sorted({r.target for r in gone})
            removed = {t: sum(r.target == t for r in gone) for t in tables}
            if apply and gone:
                try:  # a chunk that meets a lock leaves its keys to the next prune
                    with raw.cursor() as cur:
                        _short_locks_raw(cur)
                        removed = {t: deleted_keys.forget(cur, [r for r in gone if r.target == t]) for t in tables}
                    raw.commit()
                except psycopg2.errors.LockNotAvailable:
                    raw.rollback()
                    removed = {}
            for target, n in removed.items():
                per_table[target] = per_table.get(target, 0) + n
            if len(found) < chunk:
                break
    finally:
        raw.close()
    for target, n in sorted(per_table.items()):
        if n:
            progress(f"{target}: {'removed' if apply else 'would remove'} {n:,} {DELETED_KEYS_WHAT}")
    return sum(per_table.values())


def _jobless_results(engine: Engine, cutoff: datetime, apply: bool, chunk: int) -> int:
    where = "job_id IS NULL AND checked_at < :cutoff"
    if not apply:
        with engine.connect() as conn:
            return conn.scalar(text(schema.sql(f"SELECT count(*) FROM {{quality_results}} WHERE {where}")),
                               {"cutoff": cutoff})
    removed = 0
    while True:
        with engine.begin() as conn:
            _short_locks(conn)
            n = conn.execute(text(schema.sql(f"""
                DELETE FROM {{quality_results}} WHERE id IN (SELECT id FROM {{quality_results}} WHERE {where}
                ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED)""")), {"cutoff": cutoff, "n": chunk}).rowcount
        removed += n
        if n < chunk:
            return removed


def _count(engine: Engine, rule: Rule, job_id: int, cutoff: datetime) -> int:
    with engine.connect() as conn:
        return conn.scalar(text(schema.sql(f"SELECT count(*) FROM {{{rule.table}}} t JOIN {{jobs}} j ON j.id = "
                                           f"t.job_id WHERE {rule.where}")), {"job": job_id, "cutoff": cutoff})


def _apply_rule(engine: Engine, rule: Rule, job_id: int, cutoff: datetime, chunk: int) -> int:
    """Delete in chunks until none is left (or a chunk meets a lock: the rest waits for the next prune)."""
    params = {"job": job_id, "cutoff": cutoff}
    if rule.kind == "dead_letters" or rule.table == "batches":
        with engine.connect() as conn:
            if not conn.scalar(text(schema.sql(f"SELECT EXISTS (SELECT 1 FROM {{{rule.table}}} t JOIN {{jobs}} j "
                                               f"ON j.id = t.job_id WHERE {rule.where})")), params):
                return 0
        _move_horizon(engine, job_id, "dead_letters_before" if rule.kind == "dead_letters" else "history_before",
                      cutoff)
    statement = text(schema.sql(f"""
        DELETE FROM {{{rule.table}}} WHERE {rule.key} IN (
            SELECT t.{rule.key} FROM {{{rule.table}}} t JOIN {{jobs}} j ON j.id = t.job_id WHERE {rule.where}
            ORDER BY t.{rule.key} LIMIT :n FOR UPDATE OF t SKIP LOCKED)"""))
    removed = 0
    while True:
        try:
            with engine.begin() as conn:
                _short_locks(conn)
                n = conn.execute(statement, {**params, "n": chunk}).rowcount
        except OperationalError as exc:
            if "lock timeout" in str(exc):
                return removed
            raise
        removed += n
        if n < chunk:
            return removed


def _window_jobs(engine: Engine, cutoff: datetime, among: set[int], apply: bool,
                 progress: Progress) -> tuple[set[int], int]:
    """The ids of the window jobs (of the jobs `among`) old enough to go whole, and how many went (or would)."""
    with engine.connect() as conn:
        found = [(job_id, name) for job_id, name in conn.execute(text(schema.sql(
            f"SELECT j.id, j.name FROM {{jobs}} j WHERE {WINDOW_JOBS} ORDER BY j.id")), {"cutoff": cutoff})
            if job_id in among]
    ids = {job_id for job_id, _ in found}
    if not apply:
        if found:
            progress(f"would remove {len(found):,} interval windows' jobs whole (the oldest: {found[0][1]})")
        return ids, len(found)
    removed = 0
    for job_id, _ in found:
        try:
            with engine.begin() as conn:
                _short_locks(conn)
                removed += conn.execute(text(schema.sql(f"DELETE FROM {{jobs}} j WHERE j.id = :job AND {WINDOW_JOBS}")),
                                        {"job": job_id, "cutoff": cutoff}).rowcount
        except OperationalError as exc:
            if "lock timeout" not in str(exc):
                raise
    if removed:
        progress(f"removed {removed:,} interval windows' jobs whole")
    return ids, removed


def _move_horizon(engine: Engine, job_id: int, column: str, cutoff: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(text(schema.sql(f"""
            INSERT INTO {{retention_horizons}} AS h (job_id, {column}) VALUES (:job, :cutoff)
            ON CONFLICT (job_id) DO UPDATE SET {column} = greatest(h.{column}, excluded.{column}), pruned_at = now()
            """)), {"job": job_id, "cutoff": cutoff})


def _short_locks(conn: Connection) -> None:
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))


def _short_locks_raw(cur) -> None:
    cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")

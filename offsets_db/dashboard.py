"""The streamfill page's reads (orchestration/ui): one row per job, a job's lag and throughput over a window, its
dead letters by reason, data-loss events, quality verdicts, and which batch read an offset. Read-only, bound
parameters only, through the views (offset_history, lag_history, consumer_lag, batch_throughput) and the
indexes of migrations 0003 and 0005, so a job with 100,000 batches answers each in well under a second.

A window longer than `max_points` batches is drawn in time buckets (the worst lag, the summed throughput of each
bucket): a browser draws a few thousand points quickly, not a hundred thousand."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, column, select, table

from streamfill.names import parse_table
from streamfill.offsets_db.schema import statement

OVERVIEW = """
SELECT j.id, j.name, j.kind, j.config, r.status, r.dag_id, r.airflow_run_id, r.started_at, r.ended_at,
       lc.last_commit, lag.total_lag, lag.max_lag, h.rows_hour, h.dead_hour, q.success AS quality_ok,
       q.checked_at AS quality_at, dl.events AS data_loss
FROM {jobs} j
LEFT JOIN LATERAL (SELECT status, dag_id, airflow_run_id, started_at, ended_at FROM {runs}
                   WHERE job_id = j.id ORDER BY id DESC LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT max(committed_at) AS last_commit FROM {batches} WHERE job_id = j.id) lc ON true
LEFT JOIN LATERAL (SELECT sum(lag)::bigint AS total_lag, max(lag) AS max_lag FROM {consumer_lag} c
                   WHERE c.job = j.name) lag ON true
LEFT JOIN LATERAL (SELECT sum(rows_written)::bigint AS rows_hour, sum(dead_letters)::bigint AS dead_hour FROM {batches}
                   WHERE job_id = j.id AND committed_at >= :hour_ago) h ON true
LEFT JOIN LATERAL (SELECT success, checked_at FROM {quality_results} WHERE job_id = j.id
                   ORDER BY checked_at DESC LIMIT 1) q ON true
LEFT JOIN LATERAL (SELECT count(*) AS events FROM {data_loss_events} WHERE job_id = j.id) dl ON true
WHERE CAST(:only AS text[]) IS NULL OR j.name = ANY(CAST(:only AS text[]))
ORDER BY j.name = ANY(CAST(:first AS text[])) DESC, coalesce(lc.last_commit, j.created_at) DESC, j.name
LIMIT :limit
"""


def overview(engine: Engine, now: datetime, first: list[str], limit: int = 200,
             only: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per job (of the jobs named in `only`, when given; the jobs named in `first` on top, then the most
    recently active): its newest run, last commit, lag now (sum and worst partition), rows and dead letters
    committed in the hour before `now`, newest quality verdict and count of data-loss events."""
    params = {"hour_ago": now - timedelta(hours=1), "first": list(first), "limit": limit,
              "only": None if only is None else list(only)}
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement(OVERVIEW), params)]


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(statement("SELECT count(*) FROM {jobs}"))


def next_offsets(engine: Engine, names: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    """Each job's committed next offset per partition (latest_offsets), for the jobs named."""
    out: dict[str, dict[tuple[str, int], int]] = {}
    with engine.connect() as conn:
        for job_name, topic, partition, offset in conn.execute(statement(
                "SELECT job, topic, partition, next_offset FROM {latest_offsets} "
                "WHERE job = ANY(CAST(:names AS text[]))"),
                {"names": list(names)}):
            out.setdefault(job_name, {})[(topic, partition)] = offset
    return out


def job(engine: Engine, name: str) -> dict[str, Any] | None:
    """The job's row (id, name, kind, config), None when offsets_db has no such job."""
    with engine.connect() as conn:
        found = conn.execute(statement("SELECT id, name, kind, config, created_at FROM {jobs} WHERE name = :name"),
                             {"name": name}).first()
    return dict(found._mapping) if found else None


def batch_count(engine: Engine, name: str, since: datetime) -> int:
    with engine.connect() as conn:
        return conn.scalar(statement("SELECT count(*) FROM {lag_history} WHERE job = :job AND planned_at >= :since"),
                           {"job": name, "since": since})


# One batch per time bucket, for a window of more batches than a plot draws: the bucket's batch that lagged most
# (lag) or its newest committed one (throughput). A hash aggregate over batches_job_planned (no sort of the
# window), then the picked batches by (job_id, seq); their partitions only are read after that. The picked seqs
# go to batches_job_seq as an array: joined to the aggregate, whose row count the planner takes for one per
# batch of the window, it hashed all the job's batches (its whole history) on every call.
PICK = """
WITH top AS (
    SELECT max({top}) AS top FROM {batches}
    WHERE job_id = (SELECT id FROM {jobs} WHERE name = :job) AND planned_at >= :since {where}
    GROUP BY date_bin(:bucket, planned_at, :since)
)
SELECT b.id, b.planned_at, b.committed_at, b.behind, b.rows_written, b.dead_letters,
       EXTRACT(EPOCH FROM b.committed_at - b.planned_at)::double precision AS seconds
FROM {batches} b
WHERE b.job_id = (SELECT id FROM {jobs} WHERE name = :job) AND b.seq = ANY(ARRAY(SELECT top[2] FROM top))
ORDER BY b.planned_at
"""
PICK_LAG = PICK.replace("{top}", "ARRAY[coalesce(behind, -1), seq]").replace("{where}", "")
PICK_COMMITTED = PICK.replace("{top}", "ARRAY[0, seq]").replace("{where}", "AND committed_at IS NOT NULL")


def lag_series(engine: Engine, name: str, since: datetime, bucket: timedelta | None) -> dict[str, Any]:
    """The lag each batch left behind when planned (log end - the batch's end): in total (lag_history.behind)
    and per partition (offset_history), one point per batch; with `bucket`, one per bucket: its batch that
    lagged most."""
    params = {"job": name, "since": since, "bucket": bucket}
    partitions: dict[tuple[str, int], list[tuple[datetime, int | None]]] = {}
    with engine.connect() as conn:
        if bucket is None:
            total = [(r.planned_at, r.behind) for r in conn.execute(statement(
                "SELECT planned_at, behind FROM {lag_history} WHERE job = :job AND planned_at >= :since "
                "ORDER BY planned_at, batch_seq"), params)]
            rows = conn.execute(statement(
                "SELECT planned_at, topic, partition, log_end - end_offset AS lag FROM {offset_history} "
                "WHERE job = :job AND planned_at >= :since ORDER BY topic, partition, planned_at, batch_seq"), params)
        else:
            picked = conn.execute(statement(PICK_LAG), params).all()
            total = [(r.planned_at, r.behind) for r in picked]
            # the picked ids bound both sides: with the batches' side unbound, the planner hashed all the job's
            # batches (its whole history) to join the picked ones' partitions
            rows = conn.execute(statement(
                "SELECT b.planned_at, bo.topic, bo.partition, bo.log_end - bo.end_offset AS lag "
                "FROM {batch_offsets} bo JOIN {batches} b ON b.id = bo.batch_id "
                "WHERE bo.batch_id = ANY(:ids) AND b.id = ANY(:ids) "
                "ORDER BY bo.topic, bo.partition, b.planned_at"), {"ids": [r.id for r in picked]})
        for r in rows:
            partitions.setdefault((r.topic, r.partition), []).append((r.planned_at, r.lag))
    return {"total": total, "partitions": partitions}


def throughput_series(engine: Engine, name: str, since: datetime, bucket: timedelta | None) -> list[dict[str, Any]]:
    """Committed batches (batch_throughput): offsets, rows and dead letters with the seconds from planning to
    commit; with `bucket`, the newest committed batch of each bucket."""
    params = {"job": name, "since": since, "bucket": bucket}
    with engine.connect() as conn:
        if bucket is None:
            return [dict(r._mapping) for r in conn.execute(statement(
                "SELECT committed_at, offsets, rows_written, dead_letters, seconds FROM {batch_throughput} "
                "WHERE job = :job AND planned_at >= :since AND committed_at IS NOT NULL ORDER BY committed_at"),
                params)]
        picked = conn.execute(statement(PICK_COMMITTED), params).all()
        offsets = dict(conn.execute(statement(
            "SELECT batch_id, sum(end_offset - start_offset)::bigint FROM {batch_offsets} WHERE batch_id = ANY(:ids) "
            "GROUP BY batch_id"), {"ids": [r.id for r in picked]}).all())
    return [{"committed_at": r.committed_at, "offsets": offsets.get(r.id), "rows_written": r.rows_written,
             "dead_letters": r.dead_letters, "seconds": r.seconds} for r in picked]


DEAD_LETTER_REASONS = """
WITH d AS (
    SELECT split_part(error, ': ', 1) AS reason, topic, partition, "offset", raw_value, error, created_at
    FROM {dead_letters}
    WHERE job_id = :job_id AND created_at >= :since
), counted AS (
    SELECT reason, count(*) AS count, max(created_at) AS newest FROM d GROUP BY reason
    ORDER BY count DESC, reason LIMIT :reasons
), ranked AS (
    SELECT d.reason, d.topic, d.partition, d."offset", d.raw_value, d.error,
           row_number() OVER (PARTITION BY d.reason ORDER BY d.created_at DESC, d."offset" DESC) AS rn
    FROM d JOIN counted USING (reason)
    WHERE :samples > 0
)
SELECT c.reason, c.count, c.newest, r.topic, r.partition, r."offset",
       substring(r.raw_value FROM 1 FOR :sample_bytes) AS raw_value, r.error
FROM counted c
LEFT JOIN ranked r ON r.reason = c.reason AND r.rn <= :samples
ORDER BY c.count DESC, c.reason, r.rn
"""


def dead_letter_reasons(engine: Engine, job_id: int, since: datetime, samples: int = 3, sample_bytes: int = 512,
                        reasons: int = 50) -> list[dict[str, Any]]:
    """Dead letters since `since` grouped by reason (the error up to its first ': ', which is where the value
    starts), the `reasons` most frequent, each with a count and its newest few records (the first `sample_bytes`
    bytes)."""
    out: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        for r in conn.execute(statement(DEAD_LETTER_REASONS), {"job_id": job_id, "since": since, "samples": samples,
                                                    "sample_bytes": sample_bytes, "reasons": reasons}):
            group = out.setdefault(r.reason, {"reason": r.reason, "count": r.count, "newest": r.newest,
                                              "samples": []})
            if r.offset is not None:
                group["samples"].append({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                                         "raw_value": r.raw_value, "error": r.error})
    return list(out.values())


def data_loss_events(engine: Engine, job_id: int, limit: int = 100) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement(
            "SELECT e.detected_at, e.kind, e.topic, e.partition, e.lost_from, e.lost_to, b.seq AS batch_seq "
            "FROM {data_loss_events} e LEFT JOIN {batches} b ON b.id = e.batch_id WHERE e.job_id = :job_id "
            "ORDER BY e.detected_at DESC, e.id DESC LIMIT :limit"), {"job_id": job_id, "limit": limit})]


def quality_results(engine: Engine, job_id: int, since: datetime, limit: int = 200) -> list[dict[str, Any]]:
    """Verdicts since `since`, newest first, with the failing expectations (type, column, observed result)
    picked out of the stored result in SQL, so the full results never leave the database."""
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement("""
            SELECT q.checked_at, q.suite, q.table_name, q.success, q.statistics,
                   coalesce((SELECT jsonb_agg(jsonb_build_object(
                                 'type', e->>'expectation_type', 'column', e->'kwargs'->>'column',
                                 'observed', e->'result'->'observed_value',
                                 'unexpected', e->'result'->'unexpected_count'))
                             FROM jsonb_array_elements(CASE WHEN jsonb_typeof(q.result->'expectations') = 'array'
                                                            THEN q.result->'expectations' END) e
                             WHERE (e->>'success')::boolean IS NOT TRUE), '[]'::jsonb) AS failing
            FROM {quality_results} q
            WHERE q.job_id = :job_id AND q.checked_at >= :since
            ORDER BY q.checked_at DESC LIMIT :limit"""), {"job_id": job_id, "since": since, "limit": limit})]


FIND_OFFSET = """
SELECT o.batch_seq, o.batch_id, o.spark_batch_id, o.start_offset, o.end_offset, o.planned_at, o.committed_at,
       r.id AS run_id, r.status AS run_status, r.dag_id, r.airflow_run_id, r.spark_app_id
FROM (SELECT * FROM {offset_history}
      WHERE job = :job AND topic = :topic AND partition = :partition AND start_offset <= :offset
      ORDER BY start_offset DESC LIMIT 5) o
LEFT JOIN {runs} r ON r.id = o.run_id
WHERE o.end_offset > :offset
ORDER BY o.committed_at IS NULL, o.batch_seq DESC
"""


def find_offset(engine: Engine, name: str, topic: str, partition: int, offset: int) -> list[dict[str, Any]]:
    """The job's batches whose range holds the offset (the committed one first; a batch planned but never
    committed is listed after it), with the run that read it. Bounded: the five nearest ranges below it."""
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(statement(FIND_OFFSET), {"job": name, "topic": topic,
                                                                     "partition": partition, "offset": offset})]


def dead_letter_at(engine: Engine, job_id: int, topic: str, partition: int, offset: int) -> dict[str, Any] | None:
    with engine.connect() as conn:
        found = conn.execute(statement('SELECT error, created_at FROM {dead_letters} WHERE job_id = :job_id AND '
                                  'topic = :topic AND partition = :partition AND "offset" = :offset'),
                             {"job_id": job_id, "topic": topic, "partition": partition, "offset": offset}).first()
    return dict(found._mapping) if found else None


def row_key(engine: Engine, table_name: str, key: list[str], topic: str, partition: int,
            offset: int) -> dict[str, Any] | None:
    """The key columns of the sink table's row read from (topic, partition, offset), None when no row has it.
    Table and column names are quoted by SQLAlchemy; the values are bound."""
    schema, bare = parse_table(table_name)
    cols = list(dict.fromkeys(key))
    target = table(bare, *[column(c) for c in {*cols, "topic", "partition", "offset"}], schema=schema)
    stmt = (select(*[target.c[c] for c in cols]).where(target.c.topic == topic, target.c.partition == partition,
                                                       target.c.offset == offset).limit(1))
    with engine.connect() as conn:
        found = conn.execute(stmt).first()
    return dict(found._mapping) if found else None

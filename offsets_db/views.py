"""The SQL views people query: offset_history, latest_offsets, consumer_lag (migration 0002), lag_history
(migration 0003) and batch_throughput (migration 0005)."""

OFFSET_HISTORY = """
CREATE OR REPLACE VIEW offset_history AS
SELECT j.name AS job, b.seq AS batch_seq, b.id AS batch_id, b.spark_batch_id, b.run_id,
       bo.topic, bo.partition, bo.start_offset, bo.end_offset,
       bo.end_offset - bo.start_offset AS offsets, bo.log_start, bo.log_end,
       b.planned_at, b.committed_at, b.committed_at IS NOT NULL AS committed
FROM batch_offsets bo
JOIN batches b ON b.id = bo.batch_id
JOIN jobs j ON j.id = b.job_id
"""

LATEST_OFFSETS = """
CREATE OR REPLACE VIEW latest_offsets AS
SELECT j.name AS job, s.topic, s.partition, s.next_offset, s.batch_id, s.updated_at
FROM snapshots s
JOIN jobs j ON j.id = s.job_id
"""

# Lag against the log end the broker reported when the job last planned that partition.
CONSUMER_LAG = """
CREATE OR REPLACE VIEW consumer_lag AS
SELECT j.name AS job, s.topic, s.partition, s.next_offset, le.log_end,
       GREATEST(le.log_end - s.next_offset, 0) AS lag, le.planned_at AS measured_at
FROM snapshots s
JOIN jobs j ON j.id = s.job_id
LEFT JOIN LATERAL (
    SELECT bo.log_end, b.planned_at
    FROM batches b
    JOIN batch_offsets bo ON bo.batch_id = b.id AND bo.topic = s.topic AND bo.partition = s.partition
    WHERE b.job_id = s.job_id
    ORDER BY b.seq DESC
    LIMIT 1
) le ON true
"""

# One row per batch: how far behind the log end the job was when it planned it, summed over partitions.
# Answers "how did the lag change" from batches alone, without scanning every partition's row.
LAG_HISTORY = """
CREATE OR REPLACE VIEW lag_history AS
SELECT j.name AS job, b.seq AS batch_seq, b.planned_at, b.committed_at, b.behind
FROM batches b
JOIN jobs j ON j.id = b.job_id
"""

# One row per batch with what it moved and how long it took from planning to commit: the page's throughput.
BATCH_THROUGHPUT = """
CREATE OR REPLACE VIEW batch_throughput AS
SELECT j.name AS job, b.seq AS batch_seq, b.id AS batch_id, b.run_id, b.planned_at, b.committed_at,
       (SELECT sum(bo.end_offset - bo.start_offset)::bigint FROM batch_offsets bo WHERE bo.batch_id = b.id) AS offsets,
       b.rows_written, b.dead_letters,
       EXTRACT(EPOCH FROM b.committed_at - b.planned_at)::double precision AS seconds
FROM batches b
JOIN jobs j ON j.id = b.job_id
"""

ALL = {"offset_history": OFFSET_HISTORY, "latest_offsets": LATEST_OFFSETS, "consumer_lag": CONSUMER_LAG,
       "lag_history": LAG_HISTORY, "batch_throughput": BATCH_THROUGHPUT}

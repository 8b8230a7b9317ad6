"""Exactly-once from Kafka into Postgres on the real stack: whatever kills the driver, every record lands once.

Each run that is killed is a separate driver process (its own session, so a SIGKILL takes the JVM and Python
workers with it); the checkpoint checks run in the test run's SparkSession.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration

DRIVER = Path(__file__).with_name("stream_driver.py")
REPO = Path(__file__).resolve().parents[2]


def _records(start: int, count: int, partitions: int = 4) -> list[dict]:
    return [{"key": str(i).encode(), "value": f'{{"n": {i}}}'.encode(), "partition": i % partitions}
            for i in range(start, start + count)]


def run_driver(topic: str, job: str, table: str, checkpoint: Path, failpoint: dict | None = None,
               max_per_trigger: int = 200, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for k in list(env):
        if k.startswith("STREAMFILL_FAILPOINT"):
            del env[k]
    env.update(failpoint or {})
    return subprocess.run([sys.executable, str(DRIVER), topic, job, table, str(checkpoint), str(max_per_trigger)],
                          env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True)


def table_rows(url: str, table: str) -> list[tuple[int, int]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(f'SELECT partition, "offset" FROM "{table}"'))]
    finally:
        engine.dispose()


def scalar(url: str, sql: str, **params):
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def expected(count: int, partitions: int = 4) -> list[tuple[int, int]]:
    per = [0] * partitions
    out = []
    for i in range(count):
        p = i % partitions
        out.append((p, per[p]))
        per[p] += 1
    return sorted(out)


def test_sigkill_at_every_point_of_the_commit_cycle_loses_and_duplicates_nothing(spark, stack_settings, bootstrap,
                                                                               topic_name, tmp_path, monkeypatch):
    """With the default key (topic, partition, offset): a row written twice would be refused by the key, so the
    committed batches' row counts (rows_written) are what shows that nothing was moved twice. The killed
    launches are processes of their own; the last one, which finishes, runs in the run's SparkSession."""
    monkeypatch.setenv("DRIVER_DEFAULT_KEY", "1")
    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, _records(0, 1600))
    job, table, checkpoint = f"{topic_name}-kill", f"{topic_name}_kill", tmp_path / "checkpoint"
    # each point of the cycle killed once, at a first or a later hit, before and after the log grows
    kills = [("source.planned", 1), ("sink.staged", 2), ("sink.committed", 2)]
    for i, (point, at) in enumerate(kills):
        if i == 2:
            produce(bootstrap, topic_name, _records(1600, 1600))
        done = run_driver(topic_name, job, table, checkpoint, {
            "STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_AT": str(at),
            "STREAMFILL_FAILPOINT_DIR": str(tmp_path / f"fp{i}")})
        assert done.returncode == -signal.SIGKILL, (
            f"run {i} was not killed at {point}: rc={done.returncode}\n{done.stderr[-3000:]}")
    # the rest in a few batches
    assert run_in_session(spark, bootstrap, topic_name, job, table, checkpoint, 1000, default_key=True) is None
    rows = table_rows(stack_settings.offsets_db_url, table)
    assert len(rows) == 3200, "every record exactly once"
    assert sorted(rows) == expected(3200)
    engine = create_engine(stack_settings.offsets_db_url)
    with engine.connect() as conn:
        latest = dict(conn.execute(text("SELECT partition, next_offset FROM latest_offsets WHERE job = :j"),
                                   {"j": job}).all())
        committed = conn.execute(text(
            "SELECT coalesce(sum(rows_written), 0) FROM batches b JOIN jobs j ON j.id = b.job_id "
            "WHERE j.name = :j AND committed_at IS NOT NULL"), {"j": job}).scalar()
        # the announcements' outbox: every commit took the next number in its own transaction, none was lost
        # or taken twice by the killed ones
        numbers, counter = conn.execute(text(
            "SELECT array_agg(b.commit_no ORDER BY b.commit_no), j.commits FROM batches b JOIN jobs j ON "
            "j.id = b.job_id WHERE j.name = :j AND b.committed_at IS NOT NULL GROUP BY j.commits"), {"j": job}).one()
        uncommitted = conn.execute(text("SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE "
                                        "j.name = :j AND b.committed_at IS NULL AND b.commit_no IS NOT NULL"),
                                   {"j": job}).scalar()
    engine.dispose()
    assert latest == {p: 800 for p in range(4)}
    assert committed == 3200, "rows_written of committed batches add up to the table"
    assert numbers == list(range(1, counter + 1)) and uncommitted == 0


def run_in_session(spark, bootstrap: str, topic: str, job: str, table: str, checkpoint: Path,
                   max_per_trigger: int = 200, default_key: bool = False, source_options: dict | None = None):
    """stream_driver.py's query in the run's SparkSession (no kill needed): its failure, or None. With
    `default_key`, the table keeps the default key (topic, partition, offset), as DRIVER_DEFAULT_KEY=1 does;
    `source_options` as DRIVER_SOURCE_OPTIONS."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql.functions import expr

    frame = (spark.readStream.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", max_per_trigger).option("job", job)
             .options(**(source_options or {})).load())
    key = {} if default_key else {"keyColumns": "row_id"}
    if key:
        frame = frame.withColumn("row_id", expr("uuid()"))
    query = (frame.writeStream.format("streamfill_postgres").option("table", table).option("job", job)
             .options(**key).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    except StreamingQueryException:
        pass  # its exception(), below
    failure = query.exception()
    return None if failure is None else str(failure)


def test_checkpoint_deleted_resumes_from_offsets_db_and_stale_checkpoint_is_refused(spark, stack_settings,
                                                                                  bootstrap, topic_name, tmp_path):
    """The source's own rule, for a query of the user's (a streamfill stream sets such a checkpoint aside:
    test_jobs.py)."""
    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, _records(0, 800))
    job, table, checkpoint = f"{topic_name}-ck", f"{topic_name}_ck", tmp_path / "checkpoint"
    assert run_in_session(spark, bootstrap, topic_name, job, table, checkpoint) is None
    stale = tmp_path / "stale"
    shutil.copytree(checkpoint, stale)

    produce(bootstrap, topic_name, _records(800, 800))
    shutil.rmtree(checkpoint)  # no checkpoint: the stream starts where offsets_db says, not at earliest
    assert run_in_session(spark, bootstrap, topic_name, job, table, checkpoint) is None
    assert sorted(table_rows(stack_settings.offsets_db_url, table)) == expected(1600)

    produce(bootstrap, topic_name, _records(1600, 400))
    refused = run_in_session(spark, bootstrap, topic_name, job, table, stale)
    assert refused is not None and "disagrees with offsets_db" in refused, refused
    assert f"{topic_name}-0: checkpoint 200, offsets_db 400" in refused
    assert "delete the checkpoint directory" in refused
    assert sorted(table_rows(stack_settings.offsets_db_url, table)) == expected(1600), "nothing written"

    # the same checkpoint under a job offsets_db has never seen: another job's checkpoint, refused
    foreign = run_in_session(spark, bootstrap, topic_name, f"{job}-other", f"{table}_other", stale)
    assert foreign is not None and "is not this job's: the job has no committed position in offsets_db" in foreign, \
        foreign

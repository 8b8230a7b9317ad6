"""streamfill_postgres on real Spark and PostgreSQL: the commit protocol, modes, types and bad options."""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
import uuid
from decimal import Decimal

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from sqlalchemy import text

from streamfill.connectors.spark import hold_job, register
from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration


def scalar(db, sql: str, **params):
    with db.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def kafka_df(spark, bootstrap, topic, **options):
    reader = spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def write(df, table, **options):
    writer = df.write.format("streamfill_postgres").mode("append").option("table", table)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_a_bounded_job_commits_its_plan_and_a_rerun_of_the_same_plan_writes_nothing(spark, bootstrap, topic_name,
                                                                                 db):
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": b"v%d" % i, "partition": i % 2} for i in range(300)])
    job, table = f"{topic_name}-bf", f"{topic_name}_bf"
    # a random key per row: only the commit protocol, not the key, can stop the rerun from landing again
    with hold_job(job) as generation:  # a bounded read and write of one's own take the job first
        df = kafka_df(spark, bootstrap, topic_name, job=job, jobGeneration=generation).withColumn(
            "row_id", F.expr("uuid()"))
        write(df, table, job=job, jobGeneration=generation, keyColumns="row_id")
        write(df, table, job=job, jobGeneration=generation, keyColumns="row_id")
    with pytest.raises(Exception, match="jobGeneration.*is needed by a bounded"):
        write(df, table, job=job, keyColumns="row_id")
    assert scalar(db, f'SELECT count(*) FROM "{table}"') == 300
    assert scalar(db, "SELECT count(*) FROM offset_history WHERE job = :j AND committed", j=job) == 2
    assert scalar(db, "SELECT sum(rows_written) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j",
                  j=job) == 300
    assert scalar(db, "SELECT count(*) FROM pg_tables WHERE tablename LIKE :p", p=f"_sf_stage_{table[:30]}%") == 0, \
        "each bounded write drops its staging table after its commit"


def test_append_new_keeps_existing_rows_and_replace_upserts(spark, db):
    table = f"modes_{uuid.uuid4().hex[:8]}"
    first = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
    write(first, table, keyColumns="id")
    write(spark.createDataFrame([(2, "B"), (3, "C")], "id long, v string"), table, keyColumns="id")
    with db.connect() as conn:
        assert dict(conn.execute(text(f'SELECT id, v FROM "{table}"')).all()) == {1: "a", 2: "b", 3: "C"}
    write(spark.createDataFrame([(2, "B2"), (3, "C2")], "id long, v string"), table, keyColumns="id",
          mode="replace")
    with db.connect() as conn:
        assert dict(conn.execute(text(f'SELECT id, v FROM "{table}"')).all()) == {1: "a", 2: "B2", 3: "C2"}
    assert scalar(db, "SELECT count(*) FROM pg_tables WHERE tablename LIKE :p", p=f"_sf_stage_{table}%") == 0, \
        "a write without a job drops its staging table"


def test_within_a_partition_the_later_offset_wins_whatever_the_producers_clock_says(spark, db):
    """Offsets 0-3 of one partition, the producer's clock going back 5 s between them: the newer c7 lands and the
    tombstone of c8 deletes it, in one write, in two, and after a replay of the range. Between partitions the
    later timestamp wins, or the versionColumn where one is named."""
    at = dt.datetime(2026, 12, 7, 10, 0, 5)
    back = at - dt.timedelta(seconds=5)
    schema = "topic string, partition int, offset long, kafka_timestamp timestamp, id string, v string, " \
             "seq long, _delete boolean"
    rows = [("t", 0, 0, at, "c7", "old", 1, False), ("t", 0, 1, back, "c7", "new", 2, False),
            ("t", 0, 2, at, "c8", "old", 1, False), ("t", 0, 3, back, "c8", None, 2, True),
            # c9 in two partitions: the later timestamp wins, whatever the offsets; seq says otherwise
            ("t", 0, 4, at, "c9", "p0 later", 1, False), ("t", 1, 9, back, "c9", "p1 earlier", 2, False)]
    tables = {k: f"clocks_{k}_{uuid.uuid4().hex[:8]}" for k in ("once", "split", "seq")}

    def put(table, picked, **options):
        write(spark.createDataFrame(picked, schema), table, keyColumns="id", mode="replace", deletes="true",
              **options)

    def rows_of(table):
        with db.connect() as conn:
            return dict(conn.execute(text(f'SELECT id, v FROM "{table}"')).all())

    put(tables["once"], rows)
    put(tables["split"], rows[0::2])
    put(tables["split"], rows[1::2])
    put(tables["split"], rows)  # a replay of the whole range changes nothing
    for table in (tables["once"], tables["split"]):
        assert rows_of(table) == {"c7": "new", "c9": "p0 later"}, table
    put(tables["seq"], rows, versionColumn="seq")
    assert rows_of(tables["seq"]) == {"c7": "new", "c9": "p1 earlier"}
    with pytest.raises(Exception, match="versionColumn.*is not a column of the DataFrame"):
        put(tables["seq"], rows, versionColumn="nope")


def test_values_survive_the_trip_through_copy(spark, db):
    table = f"types_{uuid.uuid4().hex[:8]}"
    ts = dt.datetime(2026, 11, 22, 10, 30, 15, 123456)
    rows = [(1, b"\x00\x01,\"\n", 'comma, "quote"\nnewline', "", Decimal("12.34"), True, 1.5, ts,
             dt.date(2026, 1, 2), [{"key": "h", "value": b"\xff"}]),
            (2, None, None, None, None, None, None, None, None, None)]
    df = spark.createDataFrame(rows, "id long, b binary, s string, e string, d decimal(10,2), f boolean, "
                                     "x double, t timestamp, dd date, h array<struct<key:string,value:binary>>")
    write(df, table, keyColumns="id")
    with db.connect() as conn:
        got = conn.execute(text(f'SELECT b, s, e, d, f, x, dd, h FROM "{table}" ORDER BY id')).all()
        types = dict(conn.execute(text("SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_name = :t"), {"t": table}).all())
    assert bytes(got[0][0]) == b"\x00\x01,\"\n"
    assert got[0][1:7] == ('comma, "quote"\nnewline', "", Decimal("12.34"), True, 1.5, dt.date(2026, 1, 2))
    assert got[0][7] == [{"key": "h", "value": "ff"}]
    assert got[1] == (None,) * 8, "nulls stay nulls, and an empty string stays an empty string"
    assert types["t"] == "timestamp with time zone" and types["h"] == "jsonb" and types["b"] == "bytea"


def test_a_stream_started_in_a_thread_of_its_own_after_a_foreach_batch_query_finds_the_sink(spark, tmp_path):
    """A streaming writer looks a Python data source up in its thread's active session; in a new thread after a
    foreachBatch query that was a clone without streamfill's sources (DATA_SOURCE_NOT_FOUND)."""
    batches: list[int] = []
    other = (spark.readStream.format("rate").load().writeStream.foreachBatch(lambda df, i: batches.append(i))
             .option("checkpointLocation", str(tmp_path / "other")).start())
    deadline = time.monotonic() + 120
    while not batches:
        assert time.monotonic() < deadline, "the foreachBatch query ran no batch in 120 s"
        time.sleep(0.2)
    other.stop()
    errors: list[Exception] = []

    def start_ours() -> None:
        try:
            register(spark)
            (spark.readStream.format("rate").load().writeStream.format("streamfill_postgres")
             .option("checkpointLocation", str(tmp_path / "ours")).start().stop())
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=start_ours)
    thread.start()
    thread.join(120)
    assert errors == []


@pytest.mark.parametrize("options, expected", [
    ({}, "option table=None: is required"),
    ({"table": "a.b.c"}, "is not a table name"),
    ({"table": "t_bad_mode", "mode": "upsert"}, "option mode='upsert': is not a sink mode"),
    ({"table": "t_bad_key", "keyColumns": "nope"}, "keyColumns='nope': column(s) nope are not in the DataFrame"),
    ({"table": "t_no_key"}, "no topic, partition, offset column(s) for the default unique key"),
    ({"table": "t_bad_job", "keyColumns": "id", "job": "no spaces"}, "job name 'no spaces' is not valid"),
    ({"table": "t_bad_dl", "keyColumns": "id", "deadLetters": "true", "job": "j"},
     "option deadLetters='true': needs the job option and the columns _error, _raw, topic, partition and offset "
     "(missing: _error, _raw, topic, partition, offset; job: j)"),
    ({"table": "t_bad_url", "keyColumns": "id", "url": "postgresql+psycopg2://x@127.0.0.1:1/none"},
     "cannot connect to PostgreSQL at postgresql+psycopg2://x@127.0.0.1:1/none"),
])
def test_bad_options_fail_before_any_task_with_the_value_and_the_fix(spark, options, expected):
    df = spark.createDataFrame([(1, "a")], "id long, v string")
    writer = df.write.format("streamfill_postgres").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(AnalysisException) as err:
        writer.save()
    assert expected in str(err.value)


def test_an_existing_table_is_used_and_checked(spark, db):
    table = f"existing_{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{table}" (id bigint, v text, note text DEFAULT \'kept\')'))
    df = spark.createDataFrame([(1, "a")], "id long, v string")
    with pytest.raises(AnalysisException, match=r"has no unique index on \(id\).*CREATE UNIQUE INDEX ON"):
        write(df, table, keyColumns="id")
    with db.begin() as conn:
        conn.execute(text(f'CREATE UNIQUE INDEX ON "{table}" (id)'))
    write(df, table, keyColumns="id")
    with db.connect() as conn:
        assert conn.execute(text(f'SELECT id, v, note FROM "{table}"')).all() == [(1, "a", "kept")]
    wider = spark.createDataFrame([(2, "b", 3)], "id long, v string, extra int")
    with pytest.raises(AnalysisException, match="has no column.* extra"):
        write(wider, table, keyColumns="id")
    with pytest.raises(AnalysisException, match="does not truncate tables"):
        df.write.format("streamfill_postgres").mode("overwrite").option("table", table).option(
            "keyColumns", "id").save()


def test_an_existing_tables_column_types_are_checked_before_any_task_with_the_statement_to_run(spark, db):
    table = f"typed_{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{table}" (id bigint UNIQUE, n integer, v varchar(5), w varchar, '
                          'amount numeric(14,4))'))
    # id int into bigint, w text into varchar, amount decimal(12,2) into numeric(14,4): every value fits;
    # n bigint into integer and v text into varchar(5): some would fail at COPY, on an executor
    df = spark.createDataFrame([(1, 3_000_000_000, "toolong", "x", Decimal("1.25"))],
                               "id int, n long, v string, w string, amount decimal(12,2)")
    with pytest.raises(AnalysisException) as err:
        write(df, table, keyColumns="id")
    msg = str(err.value)
    assert (f"table public.{table} has column n of type integer, but it is written as bigint; column v of type "
            "character varying(5), but it is written as text") in msg
    assert "Job aborted" not in msg and "Task" not in msg, "refused on the driver, before any task ran"
    statement = re.search(r"ALTER TABLE .*?(?=; or write into a new table)", msg).group(0)
    assert statement == (f'ALTER TABLE "public"."{table}" ALTER COLUMN "n" TYPE bigint USING "n"::bigint, '
                         'ALTER COLUMN "v" TYPE text USING "v"::text')
    with db.begin() as conn:
        conn.exec_driver_sql(statement)  # what the message says to run, as it says it
    write(df, table, keyColumns="id")
    with db.connect() as conn:
        assert conn.execute(text(f'SELECT id, n, v, w, amount FROM "{table}"')).all() == [
            (1, 3_000_000_000, "toolong", "x", Decimal("1.2500"))]


def test_a_job_records_data_loss_events_with_the_batch(spark, bootstrap, topic_name, db):
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": b"v%d" % i, "partition": 0} for i in range(100)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([KTopicPartition(topic_name, 0, 40)]).values():
        fut.result(30)
    job, table = f"{topic_name}-loss", f"{topic_name}_loss"
    with hold_job(job) as generation:
        df = kafka_df(spark, bootstrap, topic_name, job=job, jobGeneration=generation, failOnDataLoss="false",
                      startingOffsets=f'{{"{topic_name}": {{"0": 10}}}}')
        write(df, table, job=job, jobGeneration=generation)
    with db.connect() as conn:
        loss = conn.execute(text("SELECT e.kind, e.lost_from, e.lost_to, e.batch_id IS NOT NULL FROM "
                                 "data_loss_events e JOIN jobs j ON j.id = e.job_id WHERE j.name = :j"),
                            {"j": job}).all()
        planned = conn.execute(text("SELECT start_offset, end_offset, log_start, log_end FROM offset_history "
                                    "WHERE job = :j"), {"j": job}).all()
    assert loss == [("start_below_log_start", 10, 40, True)]
    assert planned == [(40, 100, 40, 100)]
    assert scalar(db, f'SELECT count(*) FROM "{table}"') == 60


def test_commit_to_group_mirrors_latest_offsets_into_the_kafka_group(spark, bootstrap, topic_name, db, tmp_path):
    create_topic(bootstrap, topic_name, 3)
    job, group = f"{topic_name}-grp", f"{topic_name}-lag"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for round_ in range(2):
        produce(bootstrap, topic_name, [{"value": b"v", "partition": i % 3} for i in range(round_ * 90, 90 + round_ * 90)])
        query = (spark.readStream.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic_name).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", 40).option("job", job).option("commitToGroup", group).load()
                 .writeStream.format("streamfill_postgres").option("table", f"{topic_name}_grp").option("job", job)
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        with db.connect() as conn:
            latest = dict(conn.execute(text("SELECT partition, next_offset FROM latest_offsets WHERE job = :j"),
                                       {"j": job}).all())
        assert latest == {p: 30 * (round_ + 1) for p in range(3)}
        assert group_offsets(admin, group, topic_name) == latest, "mirrored as the sink committed"


def group_offsets(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic}


def test_a_single_writes_stage_left_by_a_dead_driver_is_swept_by_the_next_write(stack_settings, db):
    """A driver that died between its tasks' COPY and its commit leaves its stage behind; the next write into
    the schema drops it once it is older than STREAMFILL_PG_STAGE_ORPHAN_AFTER_S. A stream's stage stays."""
    import psycopg2

    from streamfill.connectors.postgres import stage, target_setup
    from streamfill.connectors.postgres.connection import dsn
    from streamfill.connectors.postgres.target import Column

    table = f"orphans_{uuid.uuid4().hex[:8]}"
    conn = psycopg2.connect(dsn(stack_settings.offsets_db_url))
    try:
        target_table = target_setup.prepare(conn, None, table, [Column("id", "bigint")], ("id",))
        dead = stage.stage_for(target_table, f"write-{uuid.uuid4().hex}", dead_letters=False)
        stage.create(conn, dead, target_table, "write", 86_400)
        stream = stage.stage_for(target_table, "a-stream-job", dead_letters=False)
        stage.create(conn, stream, target_table, "stream", 86_400)
        with conn.cursor() as cur:  # as if created two days ago
            cur.execute(f'COMMENT ON TABLE "{dead.name}" IS %s', (
                '{"streamfill_stage": "write", "created": %d}' % (dt.datetime.now().timestamp() - 2 * 86_400),))
            cur.execute(f'COMMENT ON TABLE "{stream.name}" IS %s', (
                '{"streamfill_stage": "stream", "created": %d}' % (dt.datetime.now().timestamp() - 2 * 86_400),))
        conn.commit()
        fresh = stage.stage_for(target_table, f"write-{uuid.uuid4().hex}", dead_letters=False)
        stage.create(conn, fresh, target_table, "write", 86_400)
    finally:
        conn.close()
    with db.connect() as c:
        stages = {r[0] for r in c.execute(text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"),
                                          {"p": f"_sf_stage_{table}%"}).all()}
    assert stages == {stream.name, fresh.name}, "the orphan is dropped; the stream's and the new one stay"


def test_a_worker_keeps_only_idle_connections_and_replaces_one_the_server_ended(db):
    """The sink's connections outlive one call of a reused Python worker only when nothing of the call stays
    open on them, and a kept connection the server ended is never handed out."""
    from streamfill.connectors.postgres import pool
    from streamfill.connectors.postgres.connection import dsn

    conninfo = dsn(str(db.url.render_as_string(hide_password=False)))
    pool.close_all()
    try:
        first = pool.connect(conninfo)
        with first.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '1s'")
        first.commit()
        pool.release(first)
        again = pool.connect(conninfo)
        assert again is first, "an idle connection is kept for the next call"

        with again.cursor() as cur:
            cur.execute("SELECT 1")  # a transaction left open
        pool.release(again)
        assert again.closed, "a connection inside a transaction is closed, not kept"

        fresh = pool.connect(conninfo)
        with fresh.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        fresh.commit()
        pool.release(fresh)
        with db.connect() as conn:
            assert conn.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        replaced = pool.connect(conninfo)
        assert replaced is not fresh and fresh.closed
        with replaced.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            assert cur.fetchone()[0] != pid
        replaced.commit()
        pool.release(replaced)
    finally:
        pool.close_all()

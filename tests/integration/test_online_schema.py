"""Schema changes online (issue 46): a pipeline's table widens its columns' types safely, never keeping a reader
waiting for long (`connectors.postgres.target_setup`), and a running stream follows its entry's new optional columns and
widened types without a restart, landing every record once (`spark_jobs.stream`, `spark_jobs.entry_watch`).

The table's steps run against real PostgreSQL through `target_setup.prepare`, as a launch takes them; the stream runs in
the test run's SparkSession against the stack's Kafka, its entry in a jobs file of the test's own."""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal

import psycopg2
import psycopg2.errors
import pytest
import yaml
from confluent_kafka import Producer

from streamfill.connectors.postgres import table_evolution, target_setup
from streamfill.connectors.postgres.connection import dsn
from streamfill.connectors.postgres.target import Column
from streamfill.errors import OptionError, SinkError
from streamfill.spark_jobs import stream
from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration

KEY = ("topic", "partition", "offset")


def query(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    conn = psycopg2.connect(dsn(url))
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall()
    finally:
        conn.close()


def column_types(url: str, table: str) -> dict[str, str]:
    return dict(query(url, "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                           "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
                      (f'"{table}"',)))


def filenode(url: str, table: str) -> int:
    """The table's file on disk: a rewrite gives it a new one."""
    return query(url, "SELECT pg_relation_filenode(to_regclass(%s))", (f'"{table}"',))[0][0]


def prepare(url: str, table: str, columns: dict[str, str], change: bool = True) -> None:
    """A pipeline's launch checking (and, holding its job, changing) its table for these written columns."""
    conn = psycopg2.connect(dsn(url))
    try:
        target_setup.prepare(conn, None, table, [Column(n, t) for n, t in columns.items()], KEY, evolve=True,
                       change=change)
    finally:
        conn.close()


@pytest.fixture
def table(stack_settings, topic_name):
    """A pipeline's table made by its users, with a few rows: integer, numeric(10,2) and varchar(8) columns."""
    name, url = f"{topic_name}_w", stack_settings.offsets_db_url
    conn = psycopg2.connect(dsn(url))
    with conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{name}" (topic text, partition integer, "offset" bigint, n integer, '
                    f'amount numeric(10,2), code varchar(8), UNIQUE (topic, partition, "offset"))')
        cur.execute(f'INSERT INTO "{name}" SELECT %s, 0, g, g, g + 0.5, %s FROM generate_series(0, 99) g',
                    (topic_name, "c"))
    conn.close()
    yield name
    conn = psycopg2.connect(dsn(url))
    with conn, conn.cursor() as cur:
        cur.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
    conn.close()


WRITTEN = {"topic": "text", "partition": "integer", "offset": "bigint", "n": "integer", "amount": "numeric(10,2)",
           "code": "text"}


def test_widenings_that_change_the_catalog_only_keep_the_tables_file_and_int_to_bigint_rewrites_it(
        stack_settings, table):
    url = stack_settings.offsets_db_url
    before = filenode(url, table)
    prepare(url, table, {**WRITTEN, "amount": "numeric(14,2)"}, change=False)
    assert column_types(url, table)["amount"] == "numeric(10,2)", "checked only, before the launch holds its job"
    prepare(url, table, {**WRITTEN, "amount": "numeric(14,2)"})
    assert column_types(url, table) == {**WRITTEN, "amount": "numeric(14,2)"}  # varchar(8) to text as well
    assert filenode(url, table) == before, "a longer precision at the same scale and varchar to text rewrite nothing"
    prepare(url, table, {**WRITTEN, "amount": "numeric(16,4)", "n": "bigint", "note": "text"})
    assert column_types(url, table) == {**WRITTEN, "amount": "numeric(16,4)", "n": "bigint", "note": "text"}
    assert filenode(url, table) != before, "integer to bigint and another scale rewrite the table"
    assert query(url, f'SELECT count(*), sum(n), sum(amount), count(note) FROM "{table}"') == [
        (100, 4950, Decimal("5000.0000"), 0)]


def test_a_rewrite_above_the_bound_or_a_change_that_is_no_widening_is_refused_and_nothing_is_changed(
        stack_settings, table, monkeypatch):
    url = stack_settings.offsets_db_url
    monkeypatch.setattr(table_evolution, "REWRITE_LIMIT", 0)
    for change in (False, True):
        with pytest.raises(SinkError) as refused:
            prepare(url, table, {**WRITTEN, "n": "bigint", "amount": "numeric(14,2)", "note": "text"}, change)
        message = " ".join(str(refused.value).split())
        assert f"table public.{table}: widening column n from integer to bigint rewrites the whole table" in message
        assert (f'Run it at a quiet time: ALTER TABLE "public"."{table}" ALTER COLUMN "n" TYPE bigint, '
                f'ALTER COLUMN "amount" TYPE numeric(14,2), ALTER COLUMN "code" TYPE text;') in message
    monkeypatch.setattr(table_evolution, "REWRITE_LIMIT", 32 * 2**20)
    with pytest.raises(SinkError, match="has column amount of type numeric\\(10,2\\), but it is written as double "
                                        "precision .* ALTER TABLE"):
        prepare(url, table, {**WRITTEN, "n": "bigint", "amount": "double precision", "note": "text"})
    with pytest.raises(SinkError, match="has column n of type integer, but it is written as text"):
        prepare(url, table, {**WRITTEN, "n": "text", "note": "text"})
    assert column_types(url, table) == {**WRITTEN, "code": "character varying(8)"}, "nothing was changed"


def test_a_change_that_what_depends_on_the_column_refuses_is_undone_whole(stack_settings, table):
    url = stack_settings.offsets_db_url
    conn = psycopg2.connect(dsn(url))
    with conn, conn.cursor() as cur:
        cur.execute(f'CREATE VIEW "{table}_v" AS SELECT n FROM "{table}"')
    conn.close()
    with pytest.raises(SinkError) as refused:
        prepare(url, table, {**WRITTEN, "n": "bigint", "note": "text"})
    message = " ".join(str(refused.value).split())
    assert (f'table public.{table}: ALTER TABLE "public"."{table}" ALTER COLUMN "n" TYPE bigint, ALTER COLUMN "code" '
            'TYPE text, ADD COLUMN IF NOT EXISTS "note" text failed, so nothing of it was changed: cannot alter type '
            f'of a column used by a view or rule') in message
    assert column_types(url, table) == {**WRITTEN, "code": "character varying(8)"}


# the running stream

class Probe(threading.Thread):
    """A reader of the table in a loop, each query with lock_timeout 1s: one that would wait longer behind a lock
    fails with LockNotAvailable, which is recorded."""

    def __init__(self, url: str, table: str) -> None:
        super().__init__(daemon=True)
        self.url, self.table = url, table
        self.stop, self.queries, self.refused = threading.Event(), 0, []

    def run(self) -> None:
        conn = psycopg2.connect(dsn(self.url))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = '1s'")
        try:
            while not self.stop.wait(0.02):
                try:
                    with conn.cursor() as cur:
                        cur.execute(f'SELECT count(*) FROM (SELECT * FROM "{self.table}" LIMIT 10) s')
                        cur.fetchone()
                    self.queries += 1
                except psycopg2.errors.LockNotAvailable as exc:
                    self.refused.append(" ".join(str(exc).split()))
                except psycopg2.errors.UndefinedTable:
                    pass  # the stream has not made it yet
        finally:
            conn.close()


class Feeder(threading.Thread):
    """Records of the entry's first shape, a few at a time, for as long as it runs: the change is made while
    records keep coming."""

    def __init__(self, bootstrap: str, topic: str, first: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.next, self.stop = topic, first, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            for _ in range(5):
                self.producer.produce(self.topic, old_shape(self.next), partition=self.next % 2)
                self.next += 1
            self.producer.poll(0)
        assert self.producer.flush(60) == 0


def old_shape(i: int) -> bytes:
    return json.dumps({"label": f"l{i}", "n": i, "amount": f"{i}.50"}).encode()


def new_shape(i: int) -> dict:
    return {"label": f"l{i}", "n": 2**31 + i, "amount": f"1234567890{i:02d}.25", "note": f"note {i}"}


def entry(table: str, topic: str, columns: dict) -> dict:
    return {"jobs": {topic: {"topic": topic, "table": table, "trigger": "500ms", "columns": columns}}}


V1 = {"label": {"type": "string", "required": True}, "n": {"type": "int"}, "amount": {"type": "decimal(10,2)"}}
V2 = {**V1, "n": {"type": "bigint"}, "amount": {"type": "decimal(14,2)"}, "note": {"type": "string"}}


def test_an_entry_gains_a_field_and_widens_types_while_its_stream_runs_with_no_restart_no_row_lost_no_reader_waiting_and_a_change_it_cannot_follow_stops_it(
        spark, stack_settings, bootstrap, topic_name, tmp_path, monkeypatch, capsys):
    url, job, table = stack_settings.offsets_db_url, topic_name, f"{topic_name}_online"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(entry(table, topic_name, V1), sort_keys=False))
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": old_shape(i), "partition": i % 2} for i in range(100)]
            + [{"value": b'{"n": 1}', "partition": 0}, {"value": b'{"label": "x", "n": 3000000000}', "partition": 1}])
    stop, failed, summaries = threading.Event(), [], []

    def launch() -> None:
        try:
            args = stream.StreamArgs.from_flags(job=job, checkpoint=str(tmp_path / "ck"))
            summaries.append(stream.run(args, spark, stack_settings.kafka_client(), url, stop))
        except Exception as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    def committed() -> int:
        return query(url, "SELECT coalesce(sum(offsets), 0) FROM offset_history WHERE job = %s AND committed",
                     (job,))[0][0]

    def wait_for(what: str, done, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert not failed, failed
            assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
            time.sleep(0.2)

    probe, runner = Probe(url, table), threading.Thread(target=launch)
    feeder = Feeder(bootstrap, topic_name, 1000)
    probe.start()
    runner.start()
    try:
        wait_for("the first records to commit", lambda: committed() >= 102)
        feeder.start()
        jobs.write_text(yaml.safe_dump(entry(table, topic_name, V2), sort_keys=False))  # while records keep coming
        wait_for("the table's columns to widen", lambda: column_types(url, table).get("n") == "bigint")
        feeder.stop.set()
        feeder.join(60)
        fed = feeder.next - 1000
        produce(bootstrap, topic_name, [{"value": json.dumps(new_shape(i)).encode(), "partition": i % 2}
                                        for i in range(50)] + [{"value": b'{"label": "y", "n": "x"}', "partition": 0}])
        sent = 100 + 2 + fed + 50 + 1
        wait_for("every record to commit", lambda: committed() == sent)
        # then a change it cannot follow: it stops between batches and fails, naming the fix
        jobs.write_text(yaml.safe_dump(entry(table, topic_name, {**V2, "n": {"type": "string"}}), sort_keys=False))
        runner.join(300)
    finally:
        stop.set()
        runner.join(300)
        feeder.stop.set()
        probe.stop.set()
        probe.join(30)
    assert len(failed) == 1 and isinstance(failed[0], OptionError) and not summaries, failed
    message = " ".join(str(failed[0]).split())
    assert message.startswith("option columns.n.type='string': was bigint in entry") and (
        f'ALTER TABLE "{table}" ALTER COLUMN "n" TYPE text USING "n"::text), then restart the stream') in message

    # no restart: one launch, its one runs row, every batch of its, one after another from one checkpoint
    (run_id, app_id, status), = query(url, "SELECT r.id, r.spark_app_id, r.status FROM runs r JOIN jobs j ON "
                                           "j.id = r.job_id WHERE j.name = %s", (job,))
    assert (app_id, status) == (spark.sparkContext.applicationId, "failed")
    batches = query(url, "SELECT b.run_id, b.spark_batch_id, b.committed_at IS NOT NULL FROM batches b JOIN jobs j "
                         "ON j.id = b.job_id WHERE j.name = %s ORDER BY b.seq", (job,))
    assert {(r, c) for r, _, c in batches} == {(run_id, True)}
    ids = [b for _, b, _ in batches]
    assert len(ids) >= 2 and ids == list(range(ids[0], ids[0] + len(ids))), ids
    for partition in (0, 1):
        ranges = query(url, "SELECT start_offset, end_offset FROM offset_history WHERE job = %s AND partition = %s "
                            "ORDER BY batch_seq", (job, partition))
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), f"partition {partition}: {ranges}"

    # every record once: rows + dead letters = offsets, per partition, nothing twice
    rows = query(url, f'SELECT partition, "offset" FROM "{table}"')
    dead = query(url, "SELECT d.partition, d.\"offset\" FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE "
                      "j.name = %s", (job,))
    ends = dict(query(url, "SELECT partition, next_offset FROM latest_offsets WHERE job = %s", (job,)))
    assert len(rows) + len(dead) == len(set(rows) | set(dead)) == sent
    assert set(rows) | set(dead) == {(p, o) for p, end in ends.items() for o in range(end)}
    assert len(dead) == 3, "label missing; 3000000000 as int before the change; 'x' as bigint after it"

    # the new column and the widened types hold the new values
    assert column_types(url, table) == {"topic": "text", "partition": "integer", "offset": "bigint",
                                        "kafka_timestamp": "timestamp with time zone", "label": "text", "n": "bigint",
                                        "amount": "numeric(14,2)", "note": "text"}
    assert query(url, "SELECT data_type, numeric_precision, numeric_scale FROM information_schema.columns WHERE "
                      "table_name = %s AND column_name IN ('n', 'amount') ORDER BY column_name", (table,)) == [
        ("numeric", 14, 2), ("bigint", 64, 0)]
    landed = {r[0]: r[1:] for r in query(url, f'SELECT label, n, amount, note FROM "{table}" WHERE note IS NOT NULL')}
    assert landed == {f"l{i}": (2**31 + i, Decimal(f"1234567890{i:02d}.25"), f"note {i}") for i in range(50)}
    assert query(url, f'SELECT count(*) FROM "{table}" WHERE note IS NULL') == [(100 + fed,)]

    # said once what changed; and no reader ever waited a second
    out = " ".join(capsys.readouterr().out.split())
    assert out.count(f"stream {job}: its entry changed (column n widened from int to bigint; column amount widened "
                     "from decimal(10,2) to decimal(14,2); column note string added); applied between two batches, "
                     "without a restart") == 1, out[-3000:]
    assert probe.queries > 100 and probe.refused == [], probe.refused[:3]


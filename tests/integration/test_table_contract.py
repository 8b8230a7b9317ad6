"""The table belongs to its users (docs/guarantees.md, "The table is yours"): while streamfill writes a table, its users
read it for as long as they like, delete and update rows, point other jobs at it, add triggers, publications and
indexes, or create it themselves. Each test is one such use against real PostgreSQL (and Kafka and Spark where
the use goes through them). The sink-level tests drive the sink's own steps without Spark, as its tasks and
driver do: plan the write, stage each Kafka partition's rows, commit. Tests that break things (concurrent users
of the table) end with every offset accounted for once: rows + rows the user deleted + dead letters = offsets
consumed, per partition, nothing twice.
"""

from __future__ import annotations

import json
import random
import struct
import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pytest
from sqlalchemy import create_engine, make_url, text

from streamfill.cli.stack.postgres import admin_url
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.postgres.connection import dsn
from streamfill.connectors.spark import hold_job, postgres_commit, postgres_plan, postgres_staging
from streamfill.errors import OptionError, SinkError
from streamfill.offsets_db.store import OffsetStore
from tests.kafka_helpers import create_topic, produce
from tests.private_services import crash

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


# the sink's own steps, as its tasks and driver take them

def _schema(dead_letters: bool = False, deletes: bool = False):
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("kafka_timestamp", TimestampType()),
              StructField("k", StringType()), StructField("v", StringType())]
    if dead_letters:
        fields += [StructField("_error", StringType()), StructField("_raw", BinaryType())]
    if deletes:
        fields.append(StructField("_delete", BooleanType()))
    return StructType(fields)


def sink(url: str, table: str, job: str, generation: int, ends: dict | None = None, dead_letters: bool = False,
         **options):
    """The sink's plan of one bounded write of `job` (what Spark asks of it on the driver)."""
    opts = {"table": table, "job": job, "jobGeneration": str(generation), "url": url,
            "deadLetters": str(dead_letters).lower(), **options}
    if ends is not None:
        opts["endingOffsets"] = json.dumps(ends)
    return postgres_plan.plan_write(opts, _schema(dead_letters, opts.get("deletes") == "true"), False, streaming=False)


def rows(topic: str, partition: int, start: int, end: int, *, keys=None, values=None, stamps=None,
         errors=None, deletes=None) -> pa.RecordBatch:
    n = end - start
    data = {"topic": [topic] * n, "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "kafka_timestamp": pa.array(stamps or [T0 + timedelta(milliseconds=o) for o in range(start, end)],
                                        pa.timestamp("us", tz="UTC")),
            "k": keys or [f"k{partition}-{o}" for o in range(start, end)],
            "v": values or [f"v{o}" for o in range(start, end)]}
    if errors is not None:
        data["_error"] = pa.array(errors, pa.string())
        data["_raw"] = pa.array([None if e is None else b"raw" for e in errors], pa.binary())
    if deletes is not None:  # a tombstone: its key's row goes (the value columns are null, as a parse makes them)
        data["_delete"] = pa.array(deletes, pa.bool_())
        data["v"] = [None if d else v for v, d in zip(data["v"], deletes, strict=True)]
    return pa.record_batch(data)


def write_batch(url: str, store: OffsetStore, job: str, generation: int, table: str,
                batches: dict[tuple[str, int], pa.RecordBatch | tuple[int, int]], dead_letters: bool = False,
                **options) -> None:
    """One batch of `job`: its plan recorded, each Kafka partition's rows staged by a task of its own, then the
    driver's commit (abort on failure). A value (start, end) stands for rows() of that range."""
    staged = {tp: (b if isinstance(b, pa.RecordBatch) else
                   rows(tp[0], tp[1], *b, errors=[None] * (b[1] - b[0]) if dead_letters else None,
                        deletes=[False] * (b[1] - b[0]) if options.get("deletes") == "true" else None))
              for tp, b in batches.items()}
    ranges = [OffsetRange(t, p, b.column("offset")[0].as_py(), b.column("offset")[-1].as_py() + 1)
              for (t, p), b in staged.items()]
    store.record_planned(job, ranges, generation=generation)
    ends = {}
    for r in ranges:
        ends.setdefault(r.topic, {})[str(r.partition)] = r.end
    plan = sink(url, table, job, generation, ends, dead_letters, **options)
    messages = [postgres_staging.stage_write(plan, iter([b])) for b in staged.values()]
    try:
        postgres_commit.commit(plan, messages, None)
    except BaseException:
        postgres_commit.abort(plan, messages)
        raise


def held(url: str, job: str):
    """`job` in offsets_db, held by this test as a launch would hold it."""
    store = OffsetStore(url)
    store.ensure_job(job, "backfill")
    return store, store.hold(job)


def query(url: str, sql: str, **params) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def accounted_once(url: str, table: str, jobs: list[str], consumed: dict[tuple[str, int], int],
                   deleted: set[tuple[str, int, int]]) -> None:
    """Per (topic, partition): rows + rows the user deleted + dead letters = offsets consumed, no offset twice,
    and no row the user deleted is back."""
    quoted = ".".join(f'"{part}"' for part in table.split("."))
    have = query(url, f'SELECT topic, partition, "offset" FROM {quoted}')
    dead = query(url, 'SELECT d.topic, d.partition, d."offset" FROM dead_letters d JOIN jobs j ON j.id = d.job_id '
                      "WHERE j.name = ANY(:jobs)", jobs=jobs)
    back = deleted & set(have)
    assert not back, f"{len(back)} rows the user deleted are back, e.g. {sorted(back)[:5]}"
    seen = [*have, *deleted, *dead]
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} offsets landed twice"
    per: dict[tuple[str, int], int] = {}
    for t, p, _ in seen:
        per[(t, p)] = per.get((t, p), 0) + 1
    assert per == consumed, f"rows + deleted + dead letters per partition {per} != offsets consumed {consumed}"


def wait_until_idle(url: str, table: str, timeout: float = 120) -> None:
    """Until no other session runs a statement on `table` (whatever a commit set off has ended)."""
    deadline = time.monotonic() + timeout
    while query(url, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
                     "AND query ILIKE :t", t=f"%{table}%")[0][0]:
        assert time.monotonic() < deadline, f"statements on {table} still running after {timeout} s"
        time.sleep(0.2)


class Probe(threading.Thread):
    """A dashboard's short query on the table every half second, with lock_timeout 1s: a query that would wait
    longer than about a second behind a lock fails, which the contract forbids. Records the worst wait."""

    def __init__(self, url: str, table: str, lock_timeout: str = "1s", every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.lock_timeout, self.every = url, table, lock_timeout, every
        self.stop, self.worst, self.queries, self.refused = threading.Event(), 0.0, 0, []

    def run(self) -> None:
        conn = psycopg2.connect(dsn(self.url), options=f"-c lock_timeout={self.lock_timeout}")
        conn.autocommit = True
        try:
            while not self.stop.wait(self.every):
                started = time.monotonic()
                try:
                    with conn.cursor() as cur:
                        cur.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{self.table}" LIMIT 10) s')
                        cur.fetchone()
                    self.queries += 1
                except psycopg2.errors.LockNotAvailable as exc:
                    self.refused.append(str(exc).strip())
                except psycopg2.errors.UndefinedTable:
                    pass
                self.worst = max(self.worst, time.monotonic() - started)
        finally:
            conn.close()


class Deleter(threading.Thread):
    """A user deleting rows (an erasure request, a correction) every `every` seconds: a few of each Kafka
    partition's committed rows at random; remembers what it deleted."""

    def __init__(self, url: str, table: str, partitions: list[tuple[str, int]], every: float = 0.02,
                 per_round: int = 20) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.partitions, self.every, self.per_round = url, table, partitions, every, per_round
        self.stop, self.deleted = threading.Event(), set()

    def run(self) -> None:
        conn = psycopg2.connect(dsn(self.url))
        conn.autocommit = True
        rng = random.Random(7)
        try:
            with conn.cursor() as cur:
                while not self.stop.wait(self.every):
                    for topic, partition in self.partitions:
                        try:
                            cur.execute(f'SELECT max("offset") FROM "{self.table}" WHERE topic = %s AND '
                                        'partition = %s', (topic, partition))
                        except psycopg2.errors.UndefinedTable:
                            break
                        top = cur.fetchone()[0]
                        if top is None:
                            continue
                        offsets = [rng.randrange(top + 1) for _ in range(self.per_round)]
                        cur.execute(f'DELETE FROM "{self.table}" WHERE topic = %s AND partition = %s AND '
                                    '"offset" = ANY(%s) RETURNING topic, partition, "offset"',
                                    (topic, partition, offsets))
                        self.deleted.update(tuple(r) for r in cur.fetchall())
        finally:
            conn.close()


# 1. a user's DELETE between a copy and a swap

@pytest.mark.fault
def test_rows_a_user_deletes_while_batches_commit_stay_deleted(stack_settings, topic_name):
    url = stack_settings.offsets_db_url
    job, table = f"{topic_name}-del", f"{topic_name}_del"
    store, lease = held(url, job)
    deleter = Deleter(url, table, [(topic_name, 0), (topic_name, 1)])
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 10_000),
                                                               (topic_name, 1): (0, 10_000)})
        deleter.start()
        for n in range(1, 10):  # batches of 10,000 rows per Kafka partition, deletes all along
            write_batch(url, store, job, lease.generation, table, {(topic_name, p): (n * 10_000, (n + 1) * 10_000)
                                                                   for p in (0, 1)})
        wait_until_idle(url, table)
    finally:
        deleter.stop.set()
        deleter.join(30)
        lease.release()
    wait_until_idle(url, table)
    assert len(deleter.deleted) > 100, "the user deleted rows all along"
    accounted_once(url, table, [job], {(topic_name, 0): 100_000, (topic_name, 1): 100_000}, deleter.deleted)


# 2. readers never fail a commit nor wait behind one; a lock held longer than lock_timeout delays, never fails

@pytest.mark.fault
def test_commits_go_on_while_a_reader_holds_the_table_and_wait_out_a_users_lock_without_failing(
        stack_settings, topic_name, monkeypatch):
    monkeypatch.setenv("STREAMFILL_PG_LOCK_TIMEOUT", "2s")
    url = make_url(stack_settings.offsets_db_url).update_query_dict(  # a connection pool of its own
        {"application_name": topic_name}).render_as_string(hide_password=False)
    job, table = f"{topic_name}-rd", f"{topic_name}_rd"
    store, lease = held(url, job)
    probe = Probe(url, table)
    analyst = psycopg2.connect(dsn(url))  # REPEATABLE READ, as a report that must see one state would
    analyst.set_session(isolation_level="REPEATABLE READ")
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, p): (0, 10_000) for p in (0, 1)})
        with analyst.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{table}"')  # holds ACCESS SHARE until it ends
            before = cur.fetchone()[0]
        probe.start()
        for n in range(1, 4):
            write_batch(url, store, job, lease.generation, table, {(topic_name, p): (n * 10_000, (n + 1) * 10_000)
                                                                   for p in (0, 1)})
        with analyst.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{table}"')
            assert cur.fetchone()[0] == before == 20_000, "the report's snapshot shows one state throughout"
        assert analyst.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_INTRANS, \
            "three batches committed while the report held the table"
        analyst.rollback()

        # a colleague's CREATE INDEX (SHARE lock) for longer than the commit's lock_timeout of 2 s
        colleague = psycopg2.connect(dsn(url))
        with colleague.cursor() as cur:
            cur.execute(f'LOCK TABLE "{table}" IN SHARE MODE')
        threading.Timer(6, colleague.commit).start()
        write_batch(url, store, job, lease.generation, table, {(topic_name, p): (40_000, 50_000) for p in (0, 1)})
        assert colleague.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE, \
            "the commit waited for the lock, then committed"
        colleague.close()
    finally:
        probe.stop.set()
        probe.join(30)
        analyst.close()
        lease.release()
    print(f"the probe's worst wait: {probe.worst:.3f} s over {probe.queries} queries")
    assert probe.queries > 0 and not probe.refused, f"a reader waited behind a commit: {probe.refused[:3]}"
    accounted_once(url, table, [job], {(topic_name, 0): 50_000, (topic_name, 1): 50_000}, set())


def tombstoning(topic: str, partition: int, start: int, end: int, doomed: range, slow: int | None = None):
    """Rows of offsets start..end: first a tombstone of each key of `doomed` (rows() keys of those offsets), then
    upserts of new keys; the row at offset `slow` carries the value 'slow'."""
    tombstones = len(doomed)
    keys = [f"k{partition}-{o}" for o in doomed] + [f"k{partition}-{o}" for o in range(start + tombstones, end)]
    values = ["slow" if o == slow else f"v{o}" for o in range(start, end)]
    return rows(topic, partition, start, end, keys=keys, values=values,
                deletes=[o < start + tombstones for o in range(start, end)])


def deletes_lock_holders(url: str, table: str) -> list[tuple]:
    """The sessions holding the table's deletes lock (offsets_db.deleted_keys)."""
    from streamfill.offsets_db.deleted_keys import DELETES_LOCK_SPACE

    return query(url, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :space "
                      "AND objid = ((hashtext(:t)::bigint + 4294967296) % 4294967296)::oid AND objsubid = 2",
                 space=DELETES_LOCK_SPACE, t=f"public.{table}")


@pytest.mark.fault
def test_a_deleting_commit_waits_for_another_deleting_writer_longer_than_its_lock_timeout_then_commits(
        stack_settings, topic_name, monkeypatch):
    """Two jobs with deletes into one table: one's commit holds the table's deletes lock (a user's trigger is
    slow on one of its rows) for longer than the other's lock_timeout of 2 s. The other waits its turn and commits
    after it; every offset of both is a row, a tombstone or a row a tombstone deleted, once."""
    monkeypatch.setenv("STREAMFILL_PG_LOCK_TIMEOUT", "2s")
    url = make_url(stack_settings.offsets_db_url).update_query_dict(  # a connection pool of its own
        {"application_name": topic_name}).render_as_string(hide_password=False)
    table = f"{topic_name}_dd"
    deleting = {"keyColumns": "k", "mode": "replace", "deletes": "true"}
    writers = {p: (f"{topic_name}-w{p}", *held(url, f"{topic_name}-w{p}")) for p in (0, 1)}
    admin = psycopg2.connect(dsn(admin_url(stack_settings, stack_settings.db_name)))
    admin.autocommit = True
    failed: list[BaseException] = []

    def second_batch(p: int, slow: int | None = None) -> None:
        job, store, lease = writers[p]
        write_batch(url, store, job, lease.generation, table,
                    {(topic_name, p): tombstoning(topic_name, p, 1000, 2000, range(100), slow)}, **deleting)

    def slow_writer() -> None:
        try:
            second_batch(0, slow=1500)
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            failed.append(exc)

    try:
        for p, (job, store, lease) in writers.items():
            write_batch(url, store, job, lease.generation, table, {(topic_name, p): (0, 1000)}, **deleting)
        with admin.cursor() as cur:
            cur.execute(f'CREATE FUNCTION "{table}_slow"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.v = '
                        "'slow' THEN PERFORM pg_sleep(6); END IF; RETURN NEW; END $$")
            cur.execute(f'CREATE TRIGGER slow BEFORE INSERT OR UPDATE ON "{table}" FOR EACH ROW EXECUTE FUNCTION '
                        f'"{table}_slow"()')
        slow = threading.Thread(target=slow_writer)
        slow.start()
        deadline = time.monotonic() + 120
        while not deletes_lock_holders(url, table):
            assert slow.is_alive() and time.monotonic() < deadline, f"the slow commit never took the lock: {failed}"
            time.sleep(0.05)
        second_batch(1)  # waits behind the slow commit for longer than its lock_timeout
        assert not slow.is_alive() or deletes_lock_holders(url, table) == [], "it committed after the slow one"
        slow.join(120)
        assert not failed, failed
    finally:
        for _, _, lease in writers.values():
            lease.release()
        admin.close()
    doomed = {(topic_name, p, o) for p in (0, 1) for o in (*range(100), *range(1000, 1100))}
    accounted_once(url, table, [job for job, _, _ in writers.values()],
                   {(topic_name, 0): 2000, (topic_name, 1): 2000}, doomed)
    assert query(url, f'SELECT count(*) FROM "{table}" WHERE k = ANY(:keys)',
                 keys=[f"k{p}-{o}" for p in (0, 1) for o in range(100)]) == [(0,)], "every tombstone deleted its key"


@pytest.mark.fault
def test_a_row_a_user_holds_past_the_commits_lock_timeout_fails_one_try_and_the_commit_is_tried_again_whole(
        stack_settings, topic_name, monkeypatch):
    monkeypatch.setenv("STREAMFILL_PG_LOCK_TIMEOUT", "2s")
    url = make_url(stack_settings.offsets_db_url).update_query_dict(  # a connection pool of its own
        {"application_name": topic_name}).render_as_string(hide_password=False)
    job, table = f"{topic_name}-row", f"{topic_name}_row"
    store, lease = held(url, job)
    user = psycopg2.connect(dsn(url))
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 100)}, keyColumns="k",
                    mode="replace")
        with user.cursor() as cur:  # a user's transaction updating one row, open for 3 s
            cur.execute(f'UPDATE "{table}" SET v = v WHERE k = %s', ("k0-5",))
        threading.Timer(3, user.commit).start()
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): rows(
            topic_name, 0, 100, 200, keys=[f"k0-{o}" for o in range(100)])}, keyColumns="k", mode="replace")
        assert user.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE, \
            "the commit outlasted the user's transaction"
    finally:
        user.close()
        lease.release()
    assert query(url, f'SELECT count(*), min("offset"), count(*) FILTER (WHERE v = \'v\' || "offset") FROM "{table}"') \
        == [(100, 100, 100)], "every key holds its newer version once"


def test_a_writer_without_deletes_into_a_table_with_recorded_deletes_is_refused_at_its_check_and_at_its_commit(
        stack_settings, topic_name):
    """Another entry, a replay in replace or a user's df.write, none with deletes: each would bring a deleted key
    back with an older version, so each is refused naming the option and the table, before it records anything
    (the launch's check, the sink's plan) or, planned before the table's first delete, at its commit."""
    url = stack_settings.offsets_db_url
    table = f"{topic_name}_nd"
    deleting = {"keyColumns": "k", "mode": "replace", "deletes": "true"}
    store, lease = held(url, f"{topic_name}-d")
    _, plain_lease = held(url, f"{topic_name}-p")
    plain = f"{topic_name}-p"
    older = [T0 - timedelta(days=1)] * 100  # the keys' versions from before the deletes
    try:
        write_batch(url, store, f"{topic_name}-d", lease.generation, table, {(topic_name, 0): (0, 100)}, **deleting)
        # a writer without deletes plans while the table has no delete recorded: allowed so far
        store.record_planned(plain, [OffsetRange(topic_name, 1, 0, 100)], generation=plain_lease.generation)
        plan = sink(url, table, plain, plain_lease.generation, {topic_name: {"1": 100}}, keyColumns="k",
                    mode="replace")
        messages = [postgres_staging.stage_write(plan, iter([rows(topic_name, 1, 0, 100, stamps=older,
                                                                  keys=[f"k0-{o}" for o in range(100)])]))]
        write_batch(url, store, f"{topic_name}-d", lease.generation, table,
                    {(topic_name, 0): tombstoning(topic_name, 0, 100, 200, range(10))}, **deleting)
        with pytest.raises(OptionError) as at_commit:
            postgres_commit.commit(plan, messages, None)
        postgres_commit.abort(plan, messages)
        refusals = [at_commit.value]
        for options in ({"keyColumns": "k", "mode": "replace", "job": plain}, {"keyColumns": "k"}, {}):
            with pytest.raises(OptionError) as refused:  # the launch's table check, then a user's df.write
                postgres_plan.prepare_table({"table": table, "url": url, **options}, _schema(), change=False)
            refusals.append(refused.value)
        with pytest.raises(OptionError) as refused:  # a user's df.write, planned as Spark asks the sink to
            postgres_plan.plan_write({"table": table, "url": url}, _schema(), False, streaming=False)
        refusals.append(refused.value)
    finally:
        lease.release()
        plain_lease.release()
    for refusal in refusals:
        assert refusal.option == "deletes" and f"table public.{table} has deletes of 10 key(s) recorded" in \
            str(refusal) and "deletes=true" in refusal.fix, str(refusal)
    assert query(url, f'SELECT count(*) FROM "{table}" WHERE k = ANY(:keys)', keys=[f"k0-{o}" for o in range(10)]) \
        == [(0,)], "the deleted keys stay deleted"
    assert query(url, f'SELECT count(*) FROM "{table}" WHERE partition = 1') == [(0,)], "nothing of it landed"
    assert query(url, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j "
                      "AND b.committed_at IS NOT NULL", j=plain) == [(0,)]


def test_deleted_keys_go_once_kafka_no_longer_holds_their_records_then_the_tables_commits_move_plainly_again(
        stack_settings, bootstrap, topic_name, monkeypatch):
    """A recorded delete stays while Kafka holds the record that made it (a replay could yield older records of
    its key before it); it goes once the partition's log-start offset passes it or the record is not there (here
    a transaction's marker stands at its offset, as a compacted record would be missing). Then the table's
    commits take the plain path again."""
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    from streamfill.connectors.kafka.broker import Broker
    from streamfill.connectors.postgres import move
    from streamfill.offsets_db.engine import make_engine
    from streamfill.offsets_db.retention import prune
    from streamfill.retention_ages import Retention

    url = stack_settings.offsets_db_url
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": b"x", "partition": 0}] * 100)  # offsets 0..99
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"x", partition=0)  # offset 100; the transaction's marker stands at 101
    producer.commit_transaction(30)
    produce(bootstrap, topic_name, [{"value": b"x", "partition": 0}] * 198)  # offsets 102..299
    job, table = f"{topic_name}-pr", f"{topic_name}_pr"
    deleting = {"keyColumns": "k", "mode": "replace", "deletes": "true"}
    store, lease = held(url, job)
    engine = make_engine(url)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kept_keys_only = Retention(**{kind: None for kind in Retention.kinds() if kind != "deleted_keys"})
    later = datetime.now(timezone.utc) + Retention().deleted_keys + timedelta(hours=1)

    def pruned() -> int:
        removed = prune(engine, kept_keys_only, apply=True, jobs=[job], now=later, kafka=Broker({"bootstrap.servers":
                                                                                                 bootstrap}))
        return sum(r.rows for r in removed if r.kind == "deleted_keys")

    def recorded() -> int:
        return query(url, "SELECT count(*) FROM deleted_keys WHERE target = :t", t=f"public.{table}")[0][0]

    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 100)}, **deleting)
        write_batch(url, store, job, lease.generation, table,
                    {(topic_name, 0): tombstoning(topic_name, 0, 100, 200, range(20))}, **deleting)
        assert recorded() == 20
        prune(engine, kept_keys_only, apply=True, jobs=[job], kafka=Broker({"bootstrap.servers": bootstrap}))
        assert recorded() == 20, "younger than the age: kept, Kafka or not"
        assert pruned() == 1 and recorded() == 19, "the delete at the marker's offset goes, the others are held"
        admin.delete_records([KafkaPartition(topic_name, 0, 110)])[KafkaPartition(topic_name, 0)].result(30)
        assert pruned() == 9 and recorded() == 10, "those below the new log-start offset go"
        admin.delete_records([KafkaPartition(topic_name, 0, 200)])[KafkaPartition(topic_name, 0)].result(30)
        assert pruned() == 10 and recorded() == 0

        paths = []
        real = move.MoveStatements
        monkeypatch.setattr(move, "MoveStatements", lambda *a: paths.append(a[4]) or real(*a))
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (200, 300)}, **deleting)
        assert paths == [False], "with no delete recorded and none staged, the commit moves its rows plainly"
    finally:
        lease.release()
        engine.dispose()
    assert query(url, f'SELECT count(*) FROM "{table}"') == [(80 + 80 + 100,)]


# 3. the table stays one piece: nothing grows with it, nothing scans it under a lock

def test_a_table_the_sink_creates_is_one_plain_table_whatever_its_batches_are(stack_settings, topic_name):
    url = stack_settings.offsets_db_url
    job, table = f"{topic_name}-one", f"{topic_name}_one"
    store, lease = held(url, job)
    try:
        start = 0
        for size in (10, 15_000, 10, 20_000, 10):  # small batches and large ones
            write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (start, start + size)})
            start += size
    finally:
        lease.release()
    shape = query(url, "SELECT c.relkind, (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid) "
                       "FROM pg_class c WHERE c.oid = to_regclass(:t)", t=f'"{table}"')
    assert shape == [("r", 0)], f"a plain table with no partitions and no default partition, not {shape}"
    assert query(url, f'SELECT count(*) FROM "{table}"') == [(35_030,)]


# 4. mode replace: which version of a key wins holds when the key moves to another Kafka partition

def test_replace_keeps_a_keys_newest_version_when_its_records_move_to_a_partition_added_later(
        spark, bootstrap, topic_name, db):
    from confluent_kafka.admin import AdminClient, NewPartitions
    from pyspark.sql import functions as F

    def write(job: str, subscription: tuple[str, str] = ("subscribe", topic_name)) -> None:
        with hold_job(job) as generation:
            df = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option(*subscription).option("job", job).option("jobGeneration", generation).load()
                  .select("topic", "partition", "offset", "timestamp",
                          F.get_json_object(F.col("value").cast("string"), "$.k").alias("k"),
                          F.get_json_object(F.col("value").cast("string"), "$.v").alias("v")))
            (df.write.format("streamfill_postgres").mode("append").option("table", table).option("job", job)
             .option("jobGeneration", generation).option("keyColumns", "k").option("mode", "replace").save())

    table = f"{topic_name}_latest"
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": json.dumps({"k": f"other{i}", "v": "x"}).encode(), "partition": 0}
                                    for i in range(300)] + [{"value": b'{"k": "K", "v": "old"}', "partition": 0}])
    write(f"{topic_name}-a")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic_name, 2)])[topic_name].result(30)
    produce(bootstrap, topic_name, [{"value": b'{"k": "K", "v": "new"}', "partition": 1}])  # offset 0 there
    write(f"{topic_name}-b", ("assign", json.dumps({topic_name: [1]})))
    with db.connect() as conn:
        assert conn.execute(text(f"SELECT v, partition, \"offset\" FROM \"{table}\" WHERE k = 'K'")).one() == \
            ("new", 1, 0), "the newer record wins though its offset (0, on partition 1) is lower than 300"
    write(f"{topic_name}-replay")  # another job reads both partitions again: nothing goes back
    with db.connect() as conn:
        assert conn.execute(text(f"SELECT v FROM \"{table}\" WHERE k = 'K'")).scalar() == "new"
        assert conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar() == 301


# 5. two tables whose names share a long prefix

def test_tables_whose_names_share_48_characters_each_keep_their_own_rows(spark, db, topic_name):
    prefix = f"{topic_name}_{'p' * 45}"[:50]
    tables = [f"{prefix}_one", f"{prefix}_two"]
    for n, table in enumerate(tables):
        df = spark.createDataFrame([("t", 0, o, f"{table}-{o}") for o in range(100 * n, 100 * n + 50)],
                                   "topic string, partition int, offset long, v string")
        df.write.format("streamfill_postgres").mode("append").option("table", table).save()
    with db.connect() as conn:
        for n, table in enumerate(tables):
            got = conn.execute(text(f'SELECT min("offset"), max("offset"), count(*), min(v) FROM "{table}"')).one()
            assert got == (100 * n, 100 * n + 49, 50, f"{table}-{100 * n}")


# 6. a table the user created, partitioned their own way

def test_a_users_table_partitioned_by_list_takes_rows_and_one_without_a_default_partition_is_refused_at_launch(
        stack_settings, topic_name):
    url = stack_settings.offsets_db_url
    job, table, other = f"{topic_name}-list", f"{topic_name}_list", f"{topic_name}_bypart"
    columns = 'topic text, "partition" integer, "offset" bigint, kafka_timestamp timestamptz, k text, v text'
    with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{table}" ({columns}, UNIQUE (topic, "partition", "offset")) '
                    "PARTITION BY LIST (topic)")
        cur.execute(f"CREATE TABLE \"{table}_mine\" PARTITION OF \"{table}\" FOR VALUES IN ('{topic_name}')")
        cur.execute(f'CREATE TABLE "{table}_rest" PARTITION OF "{table}" DEFAULT')
        cur.execute(f'CREATE TABLE "{other}" ({columns}, UNIQUE (topic, "partition", "offset")) '
                    'PARTITION BY LIST ("partition")')  # a Kafka partition added later would have nowhere to go
        cur.execute(f'CREATE TABLE "{other}_0" PARTITION OF "{other}" FOR VALUES IN (0)')
    store, lease = held(url, job)
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, p): (0, 12_000) for p in (0, 1)})
        with pytest.raises(SinkError) as refused:
            sink(url, other, job, lease.generation)
    finally:
        lease.release()
    assert query(url, f'SELECT count(*) FROM "{table}_mine"') == [(24_000,)], "the rows are in the user's partition"
    assert f"table public.{other} is partitioned, and {other} has no default partition" in str(refused.value)
    assert f'CREATE TABLE "public"."{other}_default" PARTITION OF {other} DEFAULT' in str(refused.value)


# 7. what the user attached to the table: triggers and a publication see every row

def test_a_trigger_and_a_publication_the_user_added_see_every_row(stack_settings, topic_name):
    url = stack_settings.offsets_db_url
    job, table = f"{topic_name}-cdc", f"{topic_name}_cdc"
    store, lease = held(url, job)
    admin = psycopg2.connect(dsn(admin_url(stack_settings, stack_settings.db_name)))
    admin.autocommit = True
    slot = f"sf_{topic_name}"
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 100)})  # the sink creates it
        with admin.cursor() as cur:  # then a user adds an audit trigger, a publication and a subscriber's slot
            cur.execute(f'CREATE TABLE "{table}_audit" (n bigint)')
            cur.execute(f'CREATE FUNCTION "{table}_count"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
                        f'INSERT INTO "{table}_audit" VALUES (1); RETURN NEW; END $$ SECURITY DEFINER')
            cur.execute(f'CREATE TRIGGER counted AFTER INSERT ON "{table}" FOR EACH ROW EXECUTE FUNCTION '
                        f'"{table}_count"()')
            cur.execute(f'CREATE PUBLICATION "{slot}" FOR TABLE "{table}"')
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true)", (slot,))
        write_batch(url, store, job, lease.generation, table, {(topic_name, p): (100, 12_100) for p in (0, 1)})
        with admin.cursor() as cur:
            cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                        "'publication_names', %s)", (slot, slot))
            messages = [bytes(r[0]) for r in cur.fetchall()]
            cur.execute("SELECT %s::regclass::oid", (f'"{table}"',))
            oid = cur.fetchone()[0]
            cur.execute(f'SELECT count(*) FROM "{table}_audit"')
            audited = cur.fetchone()[0]
    finally:
        lease.release()
        with admin.cursor() as cur:  # what the user added, the user removes (the slot is temporary)
            cur.execute(f'DROP PUBLICATION IF EXISTS "{slot}"')
            cur.execute(f'DROP FUNCTION IF EXISTS "{table}_count"() CASCADE')
            cur.execute(f'DROP TABLE IF EXISTS "{table}_audit"')
        admin.close()
    inserts = sum(1 for m in messages if m[:1] == b"I" and struct.unpack("!I", m[1:5])[0] == oid)
    assert audited == 24_000, f"the trigger fired for {audited} of the 24,000 rows"
    assert inserts == 24_000, f"the publication carried {inserts} of the 24,000 rows"


# rows the user's own constraints refuse are dead letters, the rest lands

def test_rows_the_users_constraints_refuse_become_dead_letters_with_the_reason_and_the_rest_lands(
        stack_settings, topic_name):
    url = stack_settings.offsets_db_url
    job, table = f"{topic_name}-own", f"{topic_name}_own"
    store, lease = held(url, job)
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 10)}, dead_letters=True)
        with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
            cur.execute(f'CREATE UNIQUE INDEX ON "{table}" (k)')  # the user says k is unique
            cur.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT short_v CHECK (length(v) < 6)')
            cur.execute(f'ALTER TABLE "{table}" ADD COLUMN note text NOT NULL DEFAULT \'-\'')
        keys = [f"k{i}" for i in range(10, 5010)]
        keys[100] = "k0-3"  # already in the table
        keys[200] = keys[201]  # twice in the batch
        values = [f"v{i}" for i in range(10, 5010)]
        values[300] = "toolong"
        errors = [None] * 5000
        errors[400] = "amount: not a number"  # a dead letter of the parse
        batch = rows(topic_name, 0, 10, 5010, keys=keys, values=values, errors=errors)
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): batch}, dead_letters=True)
        with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
            cur.execute(f'ALTER TABLE "{table}" ADD COLUMN required text NOT NULL DEFAULT \'x\'')
            cur.execute(f'ALTER TABLE "{table}" ALTER COLUMN required DROP DEFAULT')
        with pytest.raises(SinkError, match=r"column\(s\) required may not be null and have no default.*DROP NOT "
                                            "NULL"):
            sink(url, table, job, lease.generation, dead_letters=True)
    finally:
        lease.release()
    reasons = dict(query(url, 'SELECT d."offset", d.error FROM dead_letters d JOIN jobs j ON j.id = d.job_id '
                              "WHERE j.name = :j", j=job))
    assert set(reasons) == {110, 211, 310, 410}, reasons
    assert reasons[410] == "amount: not a number"
    assert reasons[110].startswith("the table refused the row: duplicate key value violates unique constraint")
    assert "check constraint \"short_v\"" in reasons[310]
    accounted_once(url, table, [job], {(topic_name, 0): 5010}, set())


# 8. the sweep of a dead driver's stage never takes a live write's

def test_the_sweep_leaves_the_staged_rows_of_a_live_launch_however_old(stack_settings, topic_name, monkeypatch):
    url = stack_settings.offsets_db_url
    # a schema of its own: a sweep of stages older than 1 ms would take other tests' single writes in theirs
    schema = f"{topic_name}_sweep"
    job, table = f"{topic_name}-sw", f"{schema}.{topic_name}_sw"
    with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    store, lease = held(url, job)
    try:
        store.record_planned(job, [OffsetRange(topic_name, p, 0, 12_000) for p in (0, 1)],
                             generation=lease.generation)
        plan = sink(url, table, job, lease.generation, {topic_name: {"0": 12_000, "1": 12_000}})
        staged = [postgres_staging.stage_write(plan, iter([rows(topic_name, p, 0, 12_000)])) for p in (0, 1)]
        # between its tasks and its commit, another write into the schema sweeps stages older than 1 ms (its
        # tasks' COPY of 24,000 rows took longer than that)
        monkeypatch.setenv("STREAMFILL_PG_STAGE_ORPHAN_AFTER_S", "0.001")
        other, other_lease = held(url, f"{job}-other")
        try:
            sink(url, f"{table}_other", f"{job}-other", other_lease.generation)
        finally:
            other_lease.release()
        postgres_commit.commit(plan, staged, None)
    finally:
        lease.release()
    try:
        accounted_once(url, table, [job], {(topic_name, 0): 12_000, (topic_name, 1): 12_000}, set())
        # once its launch has ended, the same stage is an orphan: the next write's sweep drops it
        stage_table = f'"{schema}"."{plan.stage.name}"'
        with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE UNLOGGED TABLE {stage_table} (x int)")
            cur.execute(f"COMMENT ON TABLE {stage_table} IS %s", (json.dumps(
                {"streamfill_stage": "write", "created": 0, "job": job, "generation": lease.generation}),))
        other, other_lease = held(url, f"{job}-other")
        try:
            sink(url, f"{table}_other", f"{job}-other", other_lease.generation)
        finally:
            other_lease.release()
        assert query(url, "SELECT to_regclass(:s) IS NULL", s=stage_table) == [(True,)]
    finally:
        with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA "{schema}" CASCADE')


# where two features meet (docs/guarantees.md, "Guarantees at every intersection")

def test_a_row_the_table_refuses_without_dead_letters_fails_the_batch_naming_it_and_commits_nothing(
        spark, stack_settings, topic_name):
    """Dead letters off: a row the user's CHECK refuses can be kept nowhere. A df.write without a job, and a
    job's batch, each fail naming the row, the constraint and the reason; nothing of the write lands and the
    job's offsets stay where they were."""
    url = stack_settings.offsets_db_url
    table = f"{topic_name}_chk"
    with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{table}" (id bigint UNIQUE, amount numeric CONSTRAINT amount_not_negative '
                    "CHECK (amount >= 0))")
    df = spark.createDataFrame([(i, -5 if i == 700 else i) for i in range(1001)], "id long, amount long")
    with pytest.raises(Exception, match=r'refused the row at id 700 by constraint amount_not_negative: new row '
                                        r'for relation ".*" violates check constraint'):
        (df.write.format("streamfill_postgres").mode("append").option("table", table).option("keyColumns", "id")
         .save())
    assert query(url, f'SELECT count(*) FROM "{table}"') == [(0,)], "nothing of the failed write landed"

    job, table = f"{topic_name}-chk", f"{topic_name}_chk_job"
    store, lease = held(url, job)
    try:
        write_batch(url, store, job, lease.generation, table, {(topic_name, 0): (0, 10)})
        with psycopg2.connect(dsn(url)) as conn, conn.cursor() as cur:
            cur.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT short_v CHECK (length(v) < 5)')
        values = [f"v{o}" for o in range(10, 310)]
        values[123] = "far too long"
        with pytest.raises(SinkError, match=rf"refused the row at topic {topic_name}, partition 0, offset 133 by "
                                            r"constraint short_v: .*Without dead letters.*nothing of this batch is "
                                            "committed"):
            write_batch(url, store, job, lease.generation, table,
                        {(topic_name, 0): rows(topic_name, 0, 10, 310, values=values)})
    finally:
        lease.release()
    assert query(url, "SELECT next_offset FROM latest_offsets WHERE job = :j", j=job) == [(10,)]
    accounted_once(url, table, [job], {(topic_name, 0): 10}, set())


@pytest.mark.fault
def test_dead_letters_a_task_staged_before_postgres_crashed_are_counted_at_the_commit(private_postgres, topic_name):
    """One task stages only dead letters, PostgreSQL crashes (recovery empties the UNLOGGED stage), a retried
    task stages the batch's rows: the commit finds a dead letter missing and fails, committing nothing; the
    replay of the batch lands every offset once."""
    url = private_postgres.settings.offsets_db_url
    job, table = f"{topic_name}-dl", f"{topic_name}_dl"
    store, lease = held(url, job)
    try:
        store.record_planned(job, [OffsetRange(topic_name, 0, 0, 100), OffsetRange(topic_name, 1, 0, 100)],
                             generation=lease.generation)
        ends = {topic_name: {"0": 100, "1": 100}}
        plan = sink(url, table, job, lease.generation, ends, dead_letters=True)
        poisoned = postgres_staging.stage_write(plan, iter([rows(topic_name, 1, 0, 100, errors=["not json"] * 100)]))
        crash(private_postgres)
        private_postgres.start()
        retried = postgres_staging.stage_write(plan, iter([rows(topic_name, 0, 0, 100, errors=[None] * 100)]))
        with pytest.raises(SinkError, match="0 staged rows and dead letters found where the tasks staged 100"):
            postgres_commit.commit(plan, [poisoned, retried], None)
        postgres_commit.abort(plan, [poisoned, retried])
        assert query(url, "SELECT count(*) FROM latest_offsets WHERE job = :j", j=job) == [(0,)]
        write_batch(url, store, job, lease.generation, table,  # Spark's replay of the batch
                    {(topic_name, 0): rows(topic_name, 0, 0, 100, errors=[None] * 100),
                     (topic_name, 1): rows(topic_name, 1, 0, 100, errors=["not json"] * 100)}, dead_letters=True)
    finally:
        lease.release()
    accounted_once(url, table, [job], {(topic_name, 0): 100, (topic_name, 1): 100}, set())


def test_replace_ranks_a_version_without_a_kafka_timestamp_below_every_version_with_one_between_partitions(
        stack_settings, topic_name):
    """Between partitions, a record whose Kafka timestamp is NULL is older than any with one, whichever batch or
    order they come in: inside one batch (DISTINCT ON) and against the row already there (ON CONFLICT). Within a
    partition the later offset wins, stamped or not."""
    url = stack_settings.offsets_db_url
    job, table = f"{topic_name}-nts", f"{topic_name}_nts"
    store, lease = held(url, job)
    try:
        stamped = T0 + timedelta(hours=1)
        # one batch: key A stamped in partition 0, unstamped in partition 1; key B stamped, then unstamped, in 0
        write_batch(url, store, job, lease.generation, table, {
            (topic_name, 0): rows(topic_name, 0, 0, 3, keys=["A", "B", "B"], values=["stamped", "b1", "b2"],
                                  stamps=[stamped, stamped, None]),
            (topic_name, 1): rows(topic_name, 1, 0, 1, keys=["A"], values=["unstamped"], stamps=[None])},
            keyColumns="k", mode="replace")
        # a later batch: an unstamped version of A in partition 1 comes after the stamped one is in the table
        write_batch(url, store, job, lease.generation, table, {(topic_name, 1): rows(
            topic_name, 1, 1, 2, keys=["A"], values=["late unstamped"], stamps=[None])}, keyColumns="k",
            mode="replace")
    finally:
        lease.release()
    assert dict(query(url, f'SELECT k, v FROM "{table}"')) == {"A": "stamped", "B": "b2"}


def test_a_column_added_for_an_entry_never_queues_readers_and_a_launch_refused_as_busy_adds_none(
        spark, stack_settings, topic_name, tmp_path, monkeypatch):
    """evolveSchema: while an analyst holds the table, the launch's ADD COLUMN asks for its lock in short tries,
    so a dashboard with a lock_timeout of 250 ms is never refused; and a launch refused because another launch
    holds its job adds no column."""
    import yaml

    from streamfill.errors import JobBusy
    from streamfill.spark_jobs import stream

    url = stack_settings.offsets_db_url
    entry, table = f"{topic_name}-ev", f"{topic_name}_ev"
    columns = {"id": {"type": "bigint"}}
    jobs = tmp_path / "jobs.yaml"

    def launch(columns: dict) -> None:
        jobs.write_text(yaml.safe_dump({"jobs": {entry: {"topic": topic_name, "table": table, "columns": columns}}}))
        monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
        args = stream.StreamArgs.from_flags(job=entry, trigger="available-now",
                                            checkpoint=str(tmp_path / f"cp{len(columns)}"))
        stream.run(args, spark, stack_settings.kafka_client(), url, threading.Event())

    create_topic(stack_settings.bootstrap_servers, topic_name, 1)
    produce(stack_settings.bootstrap_servers, topic_name, [{"value": b'{"id": 1, "note": "a"}'}])
    launch(columns)
    with hold_job(entry, kind="stream"):  # another launch holds the job
        with pytest.raises(JobBusy):
            launch({**columns, "note": {"type": "string"}})
    assert "note" not in [c for (c,) in query(url, "SELECT column_name::text FROM information_schema.columns "
                                                   "WHERE table_name = :t", t=table)], \
        "the refused launch changed the table"

    analyst = psycopg2.connect(dsn(url))
    probe = Probe(url, table, lock_timeout="250ms", every=0.05)
    try:
        with analyst.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{table}"')  # holds ACCESS SHARE until it ends
        probe.start()
        release = threading.Timer(3, analyst.rollback)
        release.start()
        launch({**columns, "note": {"type": "string"}})
        release.join()
    finally:
        probe.stop.set()
        probe.join(30)
        analyst.close()
    assert probe.queries > 20 and not probe.refused, f"a reader queued behind the ALTER: {probe.refused[:3]}"
    assert query(url, f'SELECT id, note FROM "{table}" ORDER BY "offset"') == [(1, None)]

"""streamfill_kafka through spark.read and spark.readStream against the real broker."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.integration


def read(spark, bootstrap, **options):
    r = spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def stream(spark, bootstrap, **options):
    r = spark.readStream.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, tmp_path, name):
    q = (df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / name)).start())
    assert q.awaitTermination(180)
    return q


def qname() -> str:
    return f"q_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def four_partitions(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 4)
    produce(bootstrap, topic_name, [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 4} for i in range(400)])
    return topic_name


def test_bounded_read_returns_exactly_the_requested_ranges(spark, bootstrap, four_partitions):
    df = read(spark, bootstrap, subscribe=four_partitions,
              startingOffsets=json.dumps({four_partitions: {"0": 10, "1": 0, "2": 50, "3": 99}}),
              endingOffsets=json.dumps({four_partitions: {"0": 20, "1": 100, "2": 51, "3": 100}}))
    rows = df.select("partition", "offset").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    expected = sorted([(0, o) for o in range(10, 20)] + [(1, o) for o in range(100)] + [(2, 50), (3, 99)])
    assert got == expected, "every (partition, offset) once, nothing outside the ranges"


def test_schema_is_sparks_kafka_schema(spark, bootstrap, four_partitions):
    df = read(spark, bootstrap, subscribe=four_partitions)
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int>")
    with_headers = read(spark, bootstrap, subscribe=four_partitions, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")


def test_keys_values_and_headers_round_trip_byte_for_byte(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 1)
    records = [
        {"key": None, "value": bytes(range(256)), "headers": [("a", b"\x00\xff"), ("b", None)]},
        {"key": b"\x00\x01\x02", "value": None, "headers": []},
        {"key": "ünïcode".encode(), "value": b"", "headers": [("dup", b"1"), ("dup", b"2")]},
    ]
    produce(bootstrap, topic_name, records)
    rows = sorted(read(spark, bootstrap, subscribe=topic_name, includeHeaders="true").collect(),
                  key=lambda r: r.offset)
    assert [r.key for r in rows] == [None, b"\x00\x01\x02", "ünïcode".encode()]
    assert [r.value for r in rows] == [bytes(range(256)), None, b""]
    assert [[(h.key, h.value) for h in r.headers] for r in rows] == [
        [("a", b"\x00\xff"), ("b", None)], [], [("dup", b"1"), ("dup", b"2")]]
    assert {r.timestampType for r in rows} == {0}, "CreateTime, as Spark reports it"


def test_per_partition_json_leaving_partitions_out_uses_the_defaults(spark, bootstrap, four_partitions):
    df = read(spark, bootstrap, subscribe=four_partitions,
              startingOffsets=json.dumps({four_partitions: {"2": 90}}),
              endingOffsets=json.dumps({four_partitions: {"0": 5}}))
    counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == {0: 5, 1: 100, 2: 10, 3: 100}
    with pytest.raises(Exception, match="strictOffsets"):
        read(spark, bootstrap, subscribe=four_partitions, strictOffsets="true",
             startingOffsets=json.dumps({four_partitions: {"2": 90}})).collect()


def test_timestamps_resolve_to_the_right_offsets(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 2)
    base = (int(time.time()) - 3600) * 1000  # within retention, or the broker deletes the records
    produce(bootstrap, topic_name, [
        {"value": str(i).encode(), "partition": i % 2, "timestamp": base + i * 1000} for i in range(100)])
    df = read(spark, bootstrap, subscribe=topic_name, startingTimestamp=str(base + 20_000),
              endingTimestamp=str(base + 30_000))
    assert sorted(int(r.value) for r in df.collect()) == list(range(20, 30))
    by_partition = read(spark, bootstrap, subscribe=topic_name,
                        startingOffsetsByTimestamp=json.dumps({topic_name: {"0": base + 90_000}}))
    values = sorted(int(r.value) for r in by_partition.collect())
    assert values == sorted([90, 92, 94, 96, 98] + list(range(1, 100, 2)))
    future = read(spark, bootstrap, subscribe=topic_name, startingTimestamp=str(base + 10**9))
    assert future.count() == 0


def test_stream_respects_max_offsets_per_trigger_and_reads_each_offset_once(spark, bootstrap, four_partitions,
                                                                           tmp_path):
    name = qname()
    q = run_available_now(stream(spark, bootstrap, subscribe=four_partitions, startingOffsets="earliest",
                                 maxOffsetsPerTrigger="70"), tmp_path, name)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 70 and len(sizes) >= 6
    rows = spark.sql(f"select partition, offset from {name}").collect()
    assert len(rows) == 400 and len({(r.partition, r.offset) for r in rows}) == 400
    last = q.recentProgress[-1]["sources"][0]
    assert json.loads(last["endOffset"]) == {four_partitions: {"0": 100, "1": 100, "2": 100, "3": 100}}
    assert json.loads(last["latestOffset"]) == json.loads(last["endOffset"]), "progress reports latest offsets"


def log_ends(bootstrap, topic, partitions):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.close()
    return ends


def test_available_now_stops_at_the_offsets_of_its_start_while_producers_write(spark, bootstrap, four_partitions,
                                                                              tmp_path):
    stop = threading.Event()

    def keep_writing():
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        while not stop.is_set():
            for i in range(40):
                p.produce(four_partitions, value=b"late", partition=i % 4)
            p.flush(10)
            time.sleep(0.05)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        time.sleep(0.5)
        before = log_ends(bootstrap, four_partitions, 4)
        name = qname()
        q = run_available_now(stream(spark, bootstrap, subscribe=four_partitions, startingOffsets="earliest",
                                     maxOffsetsPerTrigger="100"), tmp_path, name)
        time.sleep(0.5)
        after = log_ends(bootstrap, four_partitions, 4)
    finally:
        stop.set()
        writer.join()
    final = {int(p): o for p, o in json.loads(q.recentProgress[-1]["sources"][0]["endOffset"])[four_partitions].items()}
    assert all(before[p] <= final[p] for p in range(4)), "everything there at the start is read"
    assert sum(after.values()) > sum(final.values()), "records written after the start are left for later"
    rows = spark.sql(f"select partition, offset from {name}").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p in range(4) for o in range(final[p])), "every offset up to the end exactly once"
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 4, "in several limited batches"


def test_a_partition_added_mid_stream_is_read_from_its_start(spark, bootstrap, topic_name, tmp_path):
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": b"old", "partition": 0} for _ in range(10)])
    name = qname()
    q = (stream(spark, bootstrap, subscribe=topic_name, startingOffsets="earliest").writeStream.format("memory")
         .queryName(name).trigger(processingTime="500 milliseconds")
         .option("checkpointLocation", str(tmp_path / name)).start())
    try:
        deadline = time.monotonic() + 300
        while spark.sql(f"select count(*) c from {name}").first().c < 10:
            assert time.monotonic() < deadline, "the stream did not read the first 10 records within 300 s"
            time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(30)
        produce(bootstrap, topic_name, [{"value": b"new", "partition": 1 + i % 2} for i in range(20)])
        deadline = time.monotonic() + 300
        while spark.sql(f"select count(*) c from {name}").first().c < 30:
            assert q.isActive, f"the stream stopped after partitions were added: {q.exception()}"
            assert time.monotonic() < deadline, "the stream did not read the added partitions within 300 s"
            time.sleep(0.5)
    finally:
        q.stop()
    rows = spark.sql(f"select partition, offset, value from {name}").collect()
    assert sorted((r.partition, r.offset) for r in rows if r.partition > 0) == sorted(
        [(1, o) for o in range(10)] + [(2, o) for o in range(10)])
    assert len(rows) == 30


def test_available_now_with_nothing_new_ends_at_once(spark, bootstrap, four_partitions, tmp_path):
    name = qname()
    run_available_now(stream(spark, bootstrap, subscribe=four_partitions, startingOffsets="latest"), tmp_path, name)
    assert spark.sql(f"select count(*) c from {name}").first().c == 0

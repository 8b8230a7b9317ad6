"""Data loss, compaction, transactions, bad options and an unreachable broker, on the real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.kafka.reader import read_range
from streamfill.errors import BrokerError
from tests.integration.test_kafka_source import read, run_available_now, stream
from tests.kafka_helpers import consume_all, create_topic, produce

pytestmark = pytest.mark.integration


def delete_below(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_records([KTP(topic, partition, offset)])[KTP(topic, partition, offset)].result(30)


@pytest.fixture
def trimmed(bootstrap, topic_name):
    """Partition 0 holds offsets 0..99 of which 0..39 were deleted; partition 1 is whole."""
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": str(i).encode(), "partition": i % 2} for i in range(200)])
    delete_below(bootstrap, topic_name, 0, 40)
    return topic_name


def test_deleted_records_inside_the_range_fail_naming_partition_and_lost_offsets(spark, bootstrap, trimmed):
    df = read(spark, bootstrap, subscribe=trimmed, startingOffsets=json.dumps({trimmed: {"0": 10}}))
    with pytest.raises(Exception) as err:
        df.collect()
    msg = str(err.value)
    assert f"{trimmed}-0" in msg and "[10, 40)" in msg and "failOnDataLoss=false" in msg


def test_with_fail_on_data_loss_false_the_read_continues_from_the_first_offset(spark, bootstrap, trimmed):
    df = read(spark, bootstrap, subscribe=trimmed, failOnDataLoss="false",
              startingOffsets=json.dumps({trimmed: {"0": 10}}))
    offsets = sorted(r.offset for r in df.where("partition = 0").collect())
    assert offsets == list(range(40, 100))
    assert df.where("partition = 1").count() == 100


def test_a_loss_recorded_with_fail_on_data_loss_false_is_reported_in_the_log(bootstrap, trimmed):
    """A fresh driver process, as a user runs it: the warning names partition and offsets."""
    script = f"""
import json
from streamfill.spark_jobs.session import spark_session
from streamfill.connectors.spark import register
spark = spark_session("loss-report", conf={{"spark.ui.enabled": "false"}})
register(spark)
df = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", "{bootstrap}")
      .option("subscribe", "{trimmed}").option("failOnDataLoss", "false")
      .option("startingOffsets", json.dumps({{"{trimmed}": {{"0": 10}}}})).load())
print("ROWS", df.count())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "ROWS 160" in done.stdout, done.stderr[-3000:]
    assert f"data loss on {trimmed}-0" in done.stderr and "[10, 40)" in done.stderr


def test_stream_fails_on_records_deleted_between_batches(spark, bootstrap, trimmed, tmp_path):
    name = f"q_{uuid.uuid4().hex[:8]}"
    df = stream(spark, bootstrap, subscribe=trimmed, startingOffsets=json.dumps({trimmed: {"0": 5, "1": 0}}))
    with pytest.raises(Exception) as err:
        run_available_now(df, tmp_path, name)
    assert f"{trimmed}-0" in str(err.value) and "[5, 40)" in str(err.value)
    ok = stream(spark, bootstrap, subscribe=trimmed, failOnDataLoss="false",
                startingOffsets=json.dumps({trimmed: {"0": 5, "1": 0}}))
    run_available_now(ok, tmp_path, name + "_ok")
    assert spark.sql(f"select count(*) c from {name}_ok where partition = 0").first().c == 60


def test_compacted_topic_reads_without_hanging_or_false_data_loss(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 1, {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "min.compaction.lag.ms": "0"})
    for round_ in range(5):
        produce(bootstrap, topic_name, [{"key": f"k{i}".encode(), "value": f"{round_}".encode()} for i in range(20)])
        time.sleep(0.3)

    def snapshot():
        return [(m.offset(), m.key()) for m in consume_all(bootstrap, topic_name, 1)]

    deadline = time.monotonic() + 180  # the cleaner takes rolled segments only: tick until it removed offsets
    while (expected := snapshot())[-1][0] + 1 == len(expected):
        assert time.monotonic() < deadline, "the log cleaner removed no offset within 180 s"
        produce(bootstrap, topic_name, [{"key": b"tick", "value": b"x"}])
        time.sleep(1)
    previous = None
    while expected != previous:  # until the cleaner is done
        assert time.monotonic() < deadline + 180, "the log cleaner was still removing offsets after 180 s"
        time.sleep(3)
        previous, expected = expected, snapshot()
    rows = read(spark, bootstrap, subscribe=topic_name).select("offset", "key").collect()
    assert sorted((r.offset, r.key) for r in rows) == sorted(expected)


def test_transactional_topic_skips_aborted_records_and_markers(spark, bootstrap, topic_name, tmp_path):
    create_topic(bootstrap, topic_name, 1)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic_name}"})
    p.init_transactions(30)
    for batch, commit in ((0, True), (1, False), (2, True), (3, False)):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic_name, value=f"{batch}-{i}".encode())
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    values = sorted(r.value.decode() for r in read(spark, bootstrap, subscribe=topic_name).collect())
    assert values == sorted([f"0-{i}" for i in range(10)] + [f"2-{i}" for i in range(10)])
    name = f"q_{uuid.uuid4().hex[:8]}"
    run_available_now(stream(spark, bootstrap, subscribe=topic_name, startingOffsets="earliest",
                             maxOffsetsPerTrigger="7"), tmp_path, name)
    assert spark.sql(f"select count(*) c from {name}").first().c == 20


@pytest.fixture
def small_topic(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": b"x", "partition": i % 2} for i in range(10)])
    return topic_name


def load_error(spark, bootstrap, streaming=False, **options) -> str:
    with pytest.raises(Exception) as err:
        if streaming:
            q = (stream(spark, bootstrap, **options).writeStream.format("memory").queryName("never")
                 .trigger(availableNow=True).start())
            q.awaitTermination(120)
        else:
            read(spark, bootstrap, **options).collect()
    return str(err.value)


@pytest.mark.parametrize("options, expected", [
    ({"subscribe": "no_such_topic_xyz"}, ["option subscribe", "unknown topic", "no_such_topic_xyz"]),
    ({"assign": '{"t": [0'}, ["option assign", "not valid JSON"]),
    ({"subscribe": "{t}", "subscribePattern": ".*"}, ["subscribe/subscribePattern/assign", "exactly one"]),
    ({"assign": '{"{t}": [7]}'}, ["option assign", "partitions 0..1", "Assign only partitions that exist"]),
    ({"subscribe": "{t}", "startingOffsets": '{"{t}": {"0": 4}}', "endingOffsets": '{"{t}": {"0": 2}}'},
     ["endingOffsets", "before its start"]),
    ({"subscribe": "{t}", "endingOffsets": '{"{t}": {"0": 99}}'}, ["endingOffsets", "beyond the log end 5"]),
    ({"subscribe": "{t}", "startingOffsets": '{"{t}": {"9": 0}}'}, ["startingOffsets", "-9"]),
])
def test_bad_options_fail_before_any_task_with_the_option_and_fix(spark, bootstrap, small_topic, options,
                                                                   expected):
    opts = {k: v.replace("{t}", small_topic) for k, v in options.items()}
    msg = load_error(spark, bootstrap, **opts)
    for e in expected:
        assert e.replace("{t}", small_topic) in msg
    assert "OptionError" in msg and "stage failure" not in msg, "raised while planning, not in a task"


@pytest.mark.parametrize("options, expected", [
    ({"endingOffsets": "latest"}, ["endingOffsets", "streaming"]),
    ({"maxOffsetsPerTrigger": "-1"}, ["maxOffsetsPerTrigger", "positive"]),
    ({"maxOffsetsPerTrigger": "lots"}, ["maxOffsetsPerTrigger", "whole number"]),
])
def test_bad_stream_options_fail_with_the_option_and_fix(spark, bootstrap, small_topic, options, expected):
    msg = load_error(spark, bootstrap, streaming=True, subscribe=small_topic, **options)
    for e in expected:
        assert e in msg


def test_an_unreachable_broker_fails_naming_servers_topic_partition_and_wait():
    kafka = {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": "1000", "log_level": "0"}
    started = time.monotonic()
    with pytest.raises(BrokerError) as err:
        list(read_range(OffsetRange("orders", 3, 0, 10), kafka, poll_timeout_ms=2000))
    msg = str(err.value)
    assert "127.0.0.1:1" in msg and "orders-3" in msg and "after waiting" in msg
    assert time.monotonic() - started < 60, "bounded wait, never forever"


def test_an_unreachable_broker_at_planning_names_the_servers(spark):
    with pytest.raises(Exception) as err:
        spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", "127.0.0.1:1") \
            .option("kafka.socket.timeout.ms", "2000").option("subscribe", "x").load().collect()
    assert "127.0.0.1:1" in str(err.value) and "broker" in str(err.value)

"""streamfill_kafka as a sink on the real broker and Spark: columns, delivery errors, transactions."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException

from tests.kafka_helpers import consume_all, create_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_rows_land_with_key_value_headers_and_partition_from_columns(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    df = spark.createDataFrame(
        [(topic_name, "k1", b"v1", 2, [("h", b"x")]), (topic_name, None, b"v2", 0, None)],
        "topic string, key string, value binary, partition int, headers array<struct<key:string,value:binary>>")
    df.write.format("streamfill_kafka").mode("append").option("kafka.bootstrap.servers", bootstrap).save()
    got = {m.value(): m for m in consume_all(bootstrap, topic_name, 3)}
    assert set(got) == {b"v1", b"v2"}
    assert (got[b"v1"].key(), got[b"v1"].partition(), got[b"v1"].headers()) == (b"k1", 2, [("h", b"x")])
    assert (got[b"v2"].key(), got[b"v2"].partition()) == (None, 0)


def test_a_stream_can_copy_one_topic_into_another(spark, bootstrap, topic_name, tmp_path):
    from tests.kafka_helpers import produce

    create_topic(bootstrap, topic_name, 2)
    create_topic(bootstrap, topic_name + "_out", 2)
    produce(bootstrap, topic_name, [{"key": b"%d" % i, "value": b"v%d" % i} for i in range(500)])
    query = (spark.readStream.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic_name).option("startingOffsets", "earliest").load()
             .select("key", "value")
             .writeStream.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic_name + "_out").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(600), "the availableNow copy did not finish within 600 s"
    finally:
        query.stop()
    assert sorted(m.value() for m in consume_all(bootstrap, topic_name + "_out", 2)) == \
        sorted(b"v%d" % i for i in range(500))


def test_an_unreachable_broker_at_flush_fails_the_task_naming_topic_partition_and_error(spark):
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as err:
        (df.write.format("streamfill_kafka").mode("append").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("kafka.delivery.timeout.ms", "3000").option("kafka.log_level", "0")
         .option("topic", "nowhere").save())
    text = str(err.value)
    assert "delivery to topic nowhere partition" in text
    assert "Message timed out" in text and "127.0.0.1:1" in text


@pytest.mark.parametrize("options, expected", [
    ({"kafka.bootstrap.servers": "x:1"}, "option topic=None: there is neither a topic option nor a topic column"),
    ({"topic": "t"}, "option kafka.bootstrap.servers=None: is required"),
    ({"kafka.bootstrap.servers": "x:1", "topic": "t", "kafka.transactional.id": "a"}, "is managed by the sink"),
    ({"kafka.bootstrap.servers": "x:1", "topic": "t", "transactional": "yes"}, "option transactional='yes'"),
])
def test_bad_sink_options_name_the_option_and_the_fix(spark, options, expected):
    writer = spark.createDataFrame([("v",)], "value string").write.format("streamfill_kafka").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(AnalysisException) as err:
        writer.save()
    assert expected in str(err.value)


def test_a_dataframe_without_a_value_column_is_refused(spark):
    writer = spark.createDataFrame([("k",)], "key string").write.format("streamfill_kafka").mode("append") \
        .option("kafka.bootstrap.servers", "x:1").option("topic", "t")
    with pytest.raises(AnalysisException, match="has no value column"):
        writer.save()


def run_retry_driver(topic: str, rows: int, transactional: bool, failpoints: Path) -> None:
    """One task attempt's Python worker dies after its fifth batch; Spark retries the task."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "STREAMFILL_SPARK_MASTER": "local[2,3]",
           "STREAMFILL_FAILPOINT": "kafka_sink.batch_sent", "STREAMFILL_FAILPOINT_AT": "5",
           "STREAMFILL_FAILPOINT_ACTION": "exit", "STREAMFILL_FAILPOINT_DIR": str(failpoints)}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("kafka_sink_driver.py")), topic,
                           str(rows), str(transactional).lower()], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (failpoints / "hits").stat().st_size > 20, "the failed attempt's batches were sent again"


def test_transactional_mode_gives_read_committed_consumers_each_record_once_after_a_task_retry(bootstrap,
                                                                                              topic_name, tmp_path):
    rows = 20_000
    create_topic(bootstrap, topic_name, 2)
    run_retry_driver(topic_name, rows, transactional=True, failpoints=tmp_path / "tx")
    committed = Counter(m.key() for m in consume_all(bootstrap, topic_name, 2, isolation="read_committed"))
    everything = consume_all(bootstrap, topic_name, 2, isolation="read_uncommitted")
    assert len(committed) == rows and set(committed.values()) == {1}, "each record once"
    assert len(everything) > rows, "the failed attempt did send records (aborted, so hidden from read_committed)"

    plain = topic_name + "_plain"
    create_topic(bootstrap, plain, 2)
    run_retry_driver(plain, rows, transactional=False, failpoints=tmp_path / "plain")
    at_least_once = Counter(m.key() for m in consume_all(bootstrap, plain, 2, isolation="read_committed"))
    assert len(at_least_once) == rows
    assert max(at_least_once.values()) == 2, "without transactions the retry repeats what the failed attempt sent"

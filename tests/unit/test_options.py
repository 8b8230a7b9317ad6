"""Option parsing: every bad value fails with the option's name and a fix, before any Spark work."""

import pytest

from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    Latest,
    SpecificOffsets,
    TimestampByPartition,
    resolve,
)
from streamfill.connectors.kafka.options import parse
from streamfill.connectors.kafka.subscription import Assign, Subscribe, SubscribePattern
from streamfill.errors import OptionError
from streamfill.partitions import TopicPartition

pytestmark = pytest.mark.unit

BASE = {"kafka.bootstrap.servers": "b:9092"}


def error(options: dict, streaming: bool = False) -> str:
    with pytest.raises(OptionError) as err:
        parse({**BASE, **options}, streaming=streaming)
    return str(err.value)


def test_defaults_follow_spark():
    batch = parse({**BASE, "subscribe": "a"}, streaming=False)
    assert batch.starting == Earliest() and batch.ending == Latest() and batch.fail_on_data_loss
    stream = parse({**BASE, "subscribe": "a"}, streaming=True)
    assert stream.starting == Latest() and stream.ending is None


def test_option_names_are_case_insensitive_and_kafka_params_pass_through():
    o = parse({**BASE, "SUBSCRIBE": "a, b", "kafka.fetch.max.bytes": "1000", "MaxOffsetsPerTrigger": "5"},
              streaming=True)
    assert o.subscription == Subscribe(("a", "b"))
    assert o.kafka["fetch.max.bytes"] == "1000" and o.max_offsets_per_trigger == 5


def test_subscription_kinds():
    assert parse({**BASE, "subscribePattern": "o.*"}, streaming=True).subscription == SubscribePattern("o.*")
    assert parse({**BASE, "assign": '{"t": [0, 2]}'}, streaming=True).subscription == Assign(
        (TopicPartition("t", 0), TopicPartition("t", 2)))


@pytest.mark.parametrize("options, names", [
    ({"subscribe": "a", "assign": '{"a": [0]}'}, ["subscribe/subscribePattern/assign", "exactly one"]),
    ({}, ["exactly one", "0 given"]),
    ({"assign": '{"a": [0'}, ["assign", "not valid JSON"]),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1,}}'}, ["startingOffsets", "not valid JSON"]),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "-5"}, ["maxOffsetsPerTrigger", "'-5'", "positive"]),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, ["maxOffsetsPerTrigger", "'ten'", "whole number"]),
    ({"subscribePattern": "(unclosed"}, ["subscribePattern", "regular expression"]),
    ({"subscribe": "a", "startingOffsets": "latest"}, ["startingOffsets", "bounded read cannot start"]),
    ({"subscribe": "a", "endingOffsets": "earliest"}, ["endingOffsets", "not a valid end"]),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -7}}'}, ["startingOffsets", "-7"]),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, ["failOnDataLoss", "true or false"]),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, ["kafka.enable.auto.commit", "Remove"]),
    ({"subscribe": "a", "kafka.sasl.mechanism": "GSSAPI", "kafka.security.protocol": "SASL_SSL"},
     ["kafka.sasl.mechanism='GSSAPI'", "is not supported", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"]),
    ({"subscribe": "a", "kafka.sasl.mechanism": "OAUTHBEARER", "kafka.security.protocol": "SASL_SSL"},
     ["kafka.sasl.oauthbearer.method", "needs a source of tokens", "kafka.sasl.oauthbearer.client.secret"]),
    ({"subscribe": "a", "kafka.sasl.mechanism": "OAUTHBEARER", "kafka.security.protocol": "SASL_SSL",
      "kafka.sasl.oauthbearer.method": "oidc", "kafka.sasl.oauthbearer.client.id": "streamfill"},
     ["kafka.sasl.oauthbearer.client.secret", "is required", "kafka.sasl.oauthbearer.token.endpoint.url"]),
    ({"subscribe": "a", "kafka.security.protocol": "SASL_SSL"}, ["kafka.sasl.mechanism", "GSSAPI"]),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, ["startingTimestamp", "epoch milliseconds"]),
])
def test_bad_options_name_the_option_and_the_fix(options, names):
    msg = error(options)
    for name in names:
        assert name in msg


@pytest.mark.parametrize("options, names", [
    ({"assign": '{"a": [true]}'}, ["assign", "partition true of a is not a partition number"]),
    ({"assign": '{"a": [0, 1.0]}'}, ["assign", "partition 1.0 of a"]),
    ({"assign": '{"a": ["1"]}'}, ["assign", 'partition "1" of a']),
    ({"assign": '{"a": [-1]}'}, ["assign", "partition -1 of a"]),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": true}}'}, ["startingOffsets", "offset true of a-0",
                                                                   "not a JSON integer"]),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1.0}}'}, ["startingOffsets", "offset 1.0 of a-0"]),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": false}}'}, ["endingOffsets", "offset false of a-0"]),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": 1e3}}'}, ["endingOffsets", "offset 1000.0 of a-0"]),
    ({"subscribe": "a", "startingOffsets": '{"a": {"\u00b2": 1}}'}, ["startingOffsets", "is not a number"]),
    ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": true}}'},
     ["startingOffsetsByTimestamp", "timestamp true of a-0 is not epoch milliseconds"]),
    ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": 17e11}}'},
     ["endingOffsetsByTimestamp", "timestamp 1700000000000.0 of a-0"]),
    ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": "1700000000000"}}'},
     ["endingOffsetsByTimestamp", 'timestamp "1700000000000" of a-0']),
    ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": -5}}'}, ["endingOffsetsByTimestamp", "-5"]),
])
def test_json_numbers_must_be_json_integers_not_booleans_or_floats(options, names):
    """Python's bool is an int: without a check, `true` would read as partition or offset 1."""
    msg = error(options)
    for name in names:
        assert name in msg


def test_json_integers_are_still_accepted_everywhere():
    o = parse({**BASE, "assign": '{"a": [0, 1]}', "startingOffsets": '{"a": {"0": 0, "1": -2}}',
               "endingOffsetsByTimestamp": '{"a": {"1": 0}}'}, streaming=False)
    assert o.subscription == Assign((TopicPartition("a", 0), TopicPartition("a", 1)))
    assert o.starting == SpecificOffsets(((TopicPartition("a", 0), 0), (TopicPartition("a", 1), -2)))
    assert o.ending == TimestampByPartition(((TopicPartition("a", 1), 0),))


def test_ending_offsets_on_a_stream_is_an_error():
    msg = error({"subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    assert "endingOffsets" in msg and "streaming" in msg and "AvailableNow" in msg


def test_bootstrap_servers_are_required():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse({"subscribe": "a"}, streaming=False)


def test_timestamp_options_take_spark_precedence():
    o = parse({**BASE, "subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "1000",
               "endingOffsetsByTimestamp": '{"a": {"0": 2000}}'}, streaming=False)
    assert o.starting == GlobalTimestamp(1000)
    assert o.ending == TimestampByPartition(((TopicPartition("a", 0), 2000),))


PARTS = [TopicPartition("t", p) for p in range(3)]
WM = {PARTS[0]: (5, 100), PARTS[1]: (0, 50), PARTS[2]: (10, 10)}


def no_times(_):
    return {}


def test_per_partition_json_gives_left_out_partitions_the_default():
    spec = SpecificOffsets(((PARTS[0], 42), (PARTS[1], -1)))
    assert resolve(spec, PARTS, WM, no_times, option="startingOffsets", default=Earliest()) == {
        PARTS[0]: 42, PARTS[1]: 50, PARTS[2]: 10}
    spec = SpecificOffsets(((PARTS[0], -2),))
    assert resolve(spec, PARTS, WM, no_times, option="endingOffsets", default=Latest()) == {
        PARTS[0]: 5, PARTS[1]: 50, PARTS[2]: 10}


def test_strict_offsets_restores_sparks_failure():
    spec = SpecificOffsets(((PARTS[0], 42),))
    with pytest.raises(OptionError, match="strictOffsets"):
        resolve(spec, PARTS, WM, no_times, option="startingOffsets", default=Earliest(), strict=True)


def test_a_partition_not_read_is_named():
    spec = SpecificOffsets(((TopicPartition("t", 9), 1),))
    with pytest.raises(OptionError, match="t-9"):
        resolve(spec, PARTS, WM, no_times, option="startingOffsets", default=Earliest())


def test_timestamps_past_the_newest_record_resolve_to_the_log_end():
    def lookup(times):
        return {tp: (7 if tp == PARTS[0] else None) for tp in times}

    assert resolve(GlobalTimestamp(123), PARTS, WM, lookup, option="startingTimestamp", default=Earliest()) == {
        PARTS[0]: 7, PARTS[1]: 50, PARTS[2]: 10}


def test_job_fencing_options():
    opts = parse({**BASE, "subscribe": "t", "job": "orders", "jobGeneration": "7", "waitForJob": "10m"}, streaming=True)
    assert (opts.job_generation, opts.wait_for_job_ms) == (7, 600_000)
    assert parse({**BASE, "subscribe": "t", "job": "orders", "waitForJob": "30"}, streaming=True).wait_for_job_ms == 30_000
    assert "only applies to a job" in error({"subscribe": "t", "waitForJob": "10m"})
    assert "waitForJob='soon': is not a duration" in error({"subscribe": "t", "job": "orders", "waitForJob": "soon"},
                                                          streaming=True)
    assert "jobGeneration='-1'" in error({"subscribe": "t", "job": "orders", "jobGeneration": "-1"})
    assert "jobGeneration=None: is needed by a bounded read with a job" in error({"subscribe": "t", "job": "x"})
    assert parse({**BASE, "subscribe": "t", "job": "x", "jobGeneration": "3"}, streaming=False).job_generation == 3


def test_every_postgres_connection_gets_timeouts_and_keepalives(monkeypatch):
    from streamfill.pg import PgSettings, connect_args

    monkeypatch.setenv("STREAMFILL_PG_LOCK_TIMEOUT", "5s")
    args = connect_args("-c TimeZone=UTC")
    assert args["keepalives"] == 1 and args["keepalives_idle"] == 30
    assert args["options"] == ("-c lock_timeout=5s -c statement_timeout=30min "
                               "-c idle_in_transaction_session_timeout=10min -c tcp_keepalives_idle=30 "
                               "-c tcp_keepalives_interval=10 -c tcp_keepalives_count=3 -c TimeZone=UTC")
    monkeypatch.setenv("STREAMFILL_PG_STATEMENT_TIMEOUT", "forever")
    with pytest.raises(ValueError, match="statement_timeout"):
        PgSettings()


def test_max_partitions_is_positive_and_not_below_min_partitions():
    assert parse({**BASE, "subscribe": "a", "maxPartitions": "2"}, streaming=True).max_partitions == 2
    assert "maxPartitions" in error({"subscribe": "a", "maxPartitions": "0"})
    message = error({"subscribe": "a", "minPartitions": "8", "maxPartitions": "2"})
    assert "minPartitions" in message and "maxPartitions=2" in message

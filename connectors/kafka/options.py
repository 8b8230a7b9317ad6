"""Every option of the `streamfill_kafka` source, parsed and validated once, on the driver.

Names follow Spark's Kafka source. Where we differ on purpose: per-partition JSON may leave partitions out
(they get earliest for a start, latest for an end) unless `strictOffsets=true`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from streamfill.connectors.kafka.client import client_config
from streamfill.connectors.kafka.json_values import JsonColumns
from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    TimestampByPartition,
    json_int,
    parse_spec,
    per_partition,
)
from streamfill.connectors.kafka.subscription import Assign, Subscribe, SubscribePattern, Subscription
from streamfill import durations
from streamfill.errors import OptionError
from streamfill.names import validate_job_name
from streamfill.options import boolean, job_generation
from streamfill.partitions import TopicPartition

# Spark manages these itself; so do we.
FORBIDDEN_KAFKA = {"enable.auto.commit", "auto.offset.reset", "key.deserializer",
                   "value.deserializer"}


@dataclass(frozen=True)
class SourceOptions:
    kafka: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_partitions: int | None = None  # at most this many tasks per batch; small ranges share one (maxPartitions)
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    strict_offsets: bool = False
    poll_timeout_ms: int = 120_000
    job: str | None = None  # records every planned range in offsets_db under this job name
    commit_to_group: str | None = None  # Kafka consumer group that mirrors the job's committed offsets
    offsets_db_url: str = ""  # where the job's offsets live (offsetsDbUrl, default STREAMFILL_DB_URL)
    job_generation: int | None = None  # the launch's hold on the job (docs/guarantees.md);
    # None: the source takes it
    wait_for_job_ms: int = 0  # how long to wait for another launch holding the job (waitForJob)
    json_columns: JsonColumns | None = None  # jsonColumns: the value typed in the read where that is certain

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]


def parse(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate every option; raise OptionError naming the option, the value and the fix."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not kafka.get("bootstrap.servers"):
        raise OptionError("kafka.bootstrap.servers", kafka.get("bootstrap.servers"), "is required",
                          "Set it to the broker list, e.g. .option('kafka.bootstrap.servers', 'host:9092')")
    for key in sorted(FORBIDDEN_KAFKA & set(kafka)):
        raise OptionError(f"kafka.{key}", kafka[key], "is managed by the source (offsets come from the plan)",
                          "Remove this option")
    if streaming and "endingoffsets" in opts:
        raise OptionError("endingOffsets", opts["endingoffsets"], "is not valid for a streaming query",
                          "Use spark.read for a bounded range, or Trigger.AvailableNow to stop at the current end")
    if streaming and ("endingtimestamp" in opts or "endingoffsetsbytimestamp" in opts):
        key = "endingTimestamp" if "endingtimestamp" in opts else "endingOffsetsByTimestamp"
        raise OptionError(key, opts[key.lower()], "is not valid for a streaming query",
                          "Use spark.read for a bounded range")
    subscription = _subscription(opts)
    starting = _spec(opts, "starting", default=Latest() if streaming else Earliest(), bounded=not streaming)
    ending = None if streaming else _spec(opts, "ending", default=Latest(), bounded=True)
    max_per = _positive(opts, "maxOffsetsPerTrigger")
    min_per = _positive(opts, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError("minOffsetsPerTrigger", min_per, f"is larger than maxOffsetsPerTrigger={max_per}",
                          "Make it at most maxOffsetsPerTrigger")
    min_tasks, max_tasks = _positive(opts, "minPartitions"), _positive(opts, "maxPartitions")
    if min_tasks is not None and max_tasks is not None and min_tasks > max_tasks:
        raise OptionError("minPartitions", min_tasks, f"is larger than maxPartitions={max_tasks}",
                          "Make it at most maxPartitions, or leave one of them out")
    return SourceOptions(
        kafka=client_config(kafka),
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(opts.get("maxtriggerdelay", "15m")),
        min_partitions=min_tasks,
        max_partitions=max_tasks,
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=boolean(opts, "failOnDataLoss", True),
        include_headers=boolean(opts, "includeHeaders"),
        strict_offsets=boolean(opts, "strictOffsets"),
        poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
        job=_job(opts),
        commit_to_group=_commit_to_group(opts),
        offsets_db_url=opts.get("offsetsdburl") or (_default_db_url() if "job" in opts else ""),
        job_generation=_bounded_generation(opts, streaming),
        wait_for_job_ms=_needs_job(opts, "waitForJob", _wait_ms(opts.get("waitforjob"))) or 0,
        json_columns=JsonColumns.from_option(opts["jsoncolumns"]) if "jsoncolumns" in opts else None,
    )


def _bounded_generation(opts: dict[str, str], streaming: bool) -> int | None:
    """A stream's source takes its job itself for the query's life; a bounded read cannot hold it until the
    write commits, so its launch takes it first and passes the generation."""
    why = "a bounded read with a job (its write commits the plan, in another process)"
    return job_generation(opts, opts.get("job"), why if "job" in opts and not streaming else None)


def _needs_job(opts: dict[str, str], name: str, value):
    if value is not None and "job" not in opts:
        raise OptionError(name, opts[name.lower()], "only applies to a job", "Add .option('job', 'NAME')")
    return value


def _wait_ms(raw: str | None) -> int | None:
    """waitForJob: how long a launch waits for the one holding its job; 0 (the default) refuses at once."""
    if raw is None:
        return None
    ms = durations.parse_ms(raw, default_unit="s")
    if ms is None:
        raise OptionError("waitForJob", raw, "is not a duration", "Use e.g. 0 (refuse at once), 30s, 10m or 1h")
    return ms


def _job(opts: dict[str, str]) -> str | None:
    return validate_job_name(opts["job"]) if "job" in opts else None


def _commit_to_group(opts: dict[str, str]) -> str | None:
    group = opts.get("committogroup")
    if group is None:
        return None
    if not group.strip():
        raise OptionError("commitToGroup", group, "is empty", "Give a consumer group id, e.g. orders-stream")
    if "job" not in opts:
        raise OptionError("commitToGroup", group, "needs the job option (offsets_db is the source of truth)",
                          "Add .option('job', 'NAME')")
    return group


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    if len(given) != 1:
        raise OptionError("subscribe/subscribePattern/assign", ", ".join(names[k] for k in given) or None,
                          f"exactly one of the three is needed, {len(given)} given",
                          "Keep exactly one: subscribe='t1,t2', subscribePattern='t.*' or assign='{\"t1\": [0, 1]}'")
    key = given[0]
    value = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", value, "names no topic", "Give comma-separated topic names")
        return Subscribe(topics)
    if key == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError("subscribePattern", value, f"is not a valid regular expression ({exc})",
                              "Fix the pattern, e.g. 'orders-.*'") from None
        return SubscribePattern(value)
    parsed = _json(value, "assign", 'e.g. {"orders": [0, 1]}')
    if not isinstance(parsed, dict) or not all(isinstance(ps, list) for ps in parsed.values()):
        raise OptionError("assign", value, "must map each topic to a list of partition numbers",
                          'Write it as {"orders": [0, 1]}')
    for topic, ps in parsed.items():
        for p in ps:
            if not json_int(p) or p < 0:
                raise OptionError("assign", value, f"partition {json.dumps(p)} of {topic} is not a partition number "
                                  "(a JSON integer >= 0)", 'Write it as {"orders": [0, 1]}')
    return Assign(tuple(TopicPartition(t, p) for t, ps in parsed.items() for p in ps))


def _spec(opts: dict[str, str], side: str, *, default: OffsetSpec, bounded: bool) -> OffsetSpec:
    """{side}Timestamp wins over {side}OffsetsByTimestamp, which wins over {side}Offsets (Spark's order)."""
    ts_key, by_ts_key, off_key = f"{side}timestamp", f"{side}offsetsbytimestamp", f"{side}offsets"
    if ts_key in opts:
        return GlobalTimestamp(_nonneg_int(opts[ts_key], f"{side}Timestamp", "epoch milliseconds"))
    if by_ts_key in opts:
        name, raw = f"{side}OffsetsByTimestamp", opts[by_ts_key]
        pairs = per_partition(raw, name)
        for tp, v in pairs:
            if not json_int(v) or v < 0:
                raise OptionError(name, raw, f"timestamp {json.dumps(v)} of {tp} is not epoch milliseconds (a JSON "
                                  "integer >= 0)", f'Write it as {{"{tp.topic}": {{"{tp.partition}": 1700000000000}}}}')
        return TimestampByPartition(tuple(pairs))
    if off_key not in opts:
        return default
    return parse_spec(opts[off_key], f"{side}Offsets", side=side, bounded=bounded)


def _json(raw: str, name: str, example: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(name, raw, f"is not valid JSON ({exc.msg} at column {exc.colno})",
                          f"Fix the JSON, {example}") from None


def _positive(opts: dict[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(name, raw, "is not a whole number", "Give a positive integer, e.g. 10000") from None
    if value <= 0:
        raise OptionError(name, raw, "must be positive", "Give a positive integer, e.g. 10000")
    return value


def _nonneg_int(raw: object, name: str, unit: str) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise OptionError(name, raw, f"is not a whole number of {unit}", f"Give {unit}, e.g. 1700000000000") from None
    if value < 0:
        raise OptionError(name, raw, "must not be negative", f"Give {unit}")
    return value


def _duration_ms(raw: str) -> int:
    ms = durations.parse_ms(raw)
    if ms is None:
        raise OptionError("maxTriggerDelay", raw, "is not a duration", "Use e.g. 500ms, 30s, 15m or 1h")
    return ms


def _default_db_url() -> str:
    """The stack's offsets_db. Imported here, not at the top: Spark's read tasks import this module, and the
    settings' import (pydantic-settings) would cost every cold Python worker most of a second."""
    from streamfill.settings import default_db_url

    return default_db_url()

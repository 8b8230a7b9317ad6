"""Every option of the `streamfill_kafka` source, parsed and validated once, on the driver.

Names follow Spark's Kafka source. Where we differ on purpose: per-partition JSON may leave partitions out
(they get earliest for a start, latest for an end) unless `strictOffsets=true`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from streamfill import durations
from streamfill.connectors.kafka.client import client_config
from streamfill.connectors.kafka.json_values import JsonColumns
from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    GroupOffsets,
    Latest,
    OffsetSpec,
    TimestampByPartition,
    json_int,
    parse_spec,
    per_partition,
)
from streamfill.connectors.kafka.source_declarations import (
    ASSIGN,
    COMMIT_TO_GROUP,
    ENDING_OFFSETS,
    ENDING_OFFSETS_BY_TIMESTAMP,
    ENDING_TIMESTAMP,
    FAIL_ON_DATA_LOSS,
    INCLUDE_HEADERS,
    JOB,
    JOB_GENERATION,
    JOB_RUN,
    JSON_COLUMNS,
    KAFKA_BOOTSTRAP_SERVERS,
    KAFKA_PROPERTIES,
    MAX_OFFSETS_PER_TRIGGER,
    MAX_PARTITIONS,
    MAX_RECORDS_PER_PARTITION,
    MAX_TRIGGER_DELAY,
    MIN_OFFSETS_PER_TRIGGER,
    MIN_PARTITIONS,
    OFFSETS_DB_URL,
    POLL_TIMEOUT_MS,
    STARTING_GROUP,
    STARTING_OFFSETS,
    STARTING_OFFSETS_BY_TIMESTAMP,
    STARTING_TIMESTAMP,
    STRICT_OFFSETS,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    WAIT_FOR_JOB,
)
from streamfill.connectors.kafka.subscription import Assign, Subscribe, SubscribePattern, Subscription
from streamfill.declarations import Option, boolean, job_generation
from streamfill.errors import OptionError
from streamfill.names import validate_job_name
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
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_partitions: int | None  # at most this many tasks per batch; small ranges share one (maxPartitions)
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    strict_offsets: bool
    poll_timeout_ms: int
    job: str | None  # records every planned range in offsets_db under this job name
    commit_to_group: str | None  # Kafka consumer group that mirrors the job's committed offsets
    offsets_db_url: str  # where the job's offsets live (offsetsDbUrl, default STREAMFILL_DB_URL); "" without a job
    job_generation: int | None  # the launch's hold on the job (docs/guarantees.md); None: the source takes it
    wait_for_job_ms: int  # how long to wait for another launch holding the job (waitForJob)
    job_run: int | None  # jobRun: the launch's runs row the source's own hold names (a detached stream's)
    json_columns: JsonColumns | None  # jsonColumns: the value typed in the read where that is certain

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]


def parse(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate every option; raise OptionError naming the option, the value and the fix."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    prefix = KAFKA_PROPERTIES.prefix
    kafka = {k[len(prefix):]: v for k, v in opts.items() if k.startswith(prefix)}
    if not opts.get(KAFKA_BOOTSTRAP_SERVERS.name):
        raise OptionError(KAFKA_BOOTSTRAP_SERVERS.key, opts.get(KAFKA_BOOTSTRAP_SERVERS.name), "is required",
                          "Set it to the broker list, e.g. .option('kafka.bootstrap.servers', 'host:9092')")
    for key in sorted(FORBIDDEN_KAFKA & set(kafka)):
        raise OptionError(f"{prefix}{key}", kafka[key], "is managed by the source (offsets come from the plan)",
                          "Remove this option")
    if streaming and ENDING_OFFSETS.name in opts:
        raise OptionError(ENDING_OFFSETS.key, opts[ENDING_OFFSETS.name], "is not valid for a streaming query",
                          "Use spark.read for a bounded range, or Trigger.AvailableNow to stop at the current end")
    for bounded_only in (ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP):
        if streaming and bounded_only.name in opts:
            raise OptionError(bounded_only.key, opts[bounded_only.name], "is not valid for a streaming query",
                              "Use spark.read for a bounded range")
    subscription = _subscription(opts)
    starting = _group_start(opts, streaming) or _spec(
        opts, (STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP, STARTING_OFFSETS), "starting",
        default=Latest() if streaming else Earliest(), bounded=not streaming)
    ending = None if streaming else _spec(opts, (ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP, ENDING_OFFSETS),
                                          "ending", default=Latest(), bounded=True)
    max_per = _positive(opts, MAX_OFFSETS_PER_TRIGGER)
    min_per = _positive(opts, MIN_OFFSETS_PER_TRIGGER)
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError(MIN_OFFSETS_PER_TRIGGER.key, min_per, f"is larger than {MAX_OFFSETS_PER_TRIGGER.key}="
                          f"{max_per}", f"Make it at most {MAX_OFFSETS_PER_TRIGGER.key}")
    min_tasks, max_tasks = _positive(opts, MIN_PARTITIONS), _positive(opts, MAX_PARTITIONS)
    if min_tasks is not None and max_tasks is not None and min_tasks > max_tasks:
        raise OptionError(MIN_PARTITIONS.key, min_tasks, f"is larger than {MAX_PARTITIONS.key}={max_tasks}",
                          f"Make it at most {MAX_PARTITIONS.key}, or leave one of them out")
    return SourceOptions(
        kafka=client_config(kafka),
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(MAX_TRIGGER_DELAY.raw(opts)),
        min_partitions=min_tasks,
        max_partitions=max_tasks,
        max_records_per_partition=_positive(opts, MAX_RECORDS_PER_PARTITION),
        fail_on_data_loss=boolean(opts, FAIL_ON_DATA_LOSS),
        include_headers=boolean(opts, INCLUDE_HEADERS),
        strict_offsets=boolean(opts, STRICT_OFFSETS),
        poll_timeout_ms=_positive(opts, POLL_TIMEOUT_MS),
        job=_job(opts),
        commit_to_group=_commit_to_group(opts),
        offsets_db_url=opts.get(OFFSETS_DB_URL.name) or (_default_db_url() if JOB.name in opts else ""),
        job_generation=_bounded_generation(opts, streaming),
        wait_for_job_ms=_needs_job(opts, WAIT_FOR_JOB, _wait_ms(opts.get(WAIT_FOR_JOB.name)))
        or _wait_ms(WAIT_FOR_JOB.default),
        json_columns=JsonColumns.from_option(opts[JSON_COLUMNS.name]) if JSON_COLUMNS.name in opts else None,
        job_run=_needs_job(opts, JOB_RUN, _job_run(opts)),
    )


def _job_run(opts: dict[str, str]) -> int | None:
    raw = opts.get(JOB_RUN.name)
    if raw is None:
        return None
    if not raw.strip().isdigit() or JOB_GENERATION.name in opts:
        raise OptionError(JOB_RUN.key, raw, "must be the id of the launch's runs row, on a source that takes the "
                          "job itself (no jobGeneration)", "Leave it out, or give the runs row's id alone")
    return int(raw)


def _bounded_generation(opts: dict[str, str], streaming: bool) -> int | None:
    """A stream's source takes its job itself for the query's life; a bounded read cannot hold it until the
    write commits, so its launch takes it first and passes the generation."""
    why = "a bounded read with a job (its write commits the plan, in another process)"
    return job_generation(opts, JOB_GENERATION, opts.get(JOB.name), why if JOB.name in opts and not streaming else None)


def _needs_job(opts: dict[str, str], option: Option, value):
    if value is not None and JOB.name not in opts:
        raise OptionError(option.key, opts[option.name], "only applies to a job", "Add .option('job', 'NAME')")
    return value


def _wait_ms(raw: str | None) -> int | None:
    """waitForJob: how long a launch waits for the one holding its job; 0 (the default) refuses at once."""
    if raw is None:
        return None
    ms = durations.parse_ms(raw, default_unit="s")
    if ms is None:
        raise OptionError(WAIT_FOR_JOB.key, raw, "is not a duration", "Use e.g. 0 (refuse at once), 30s, 10m or 1h")
    return ms


def _job(opts: dict[str, str]) -> str | None:
    return validate_job_name(opts[JOB.name]) if JOB.name in opts else None


def _commit_to_group(opts: dict[str, str]) -> str | None:
    group = opts.get(COMMIT_TO_GROUP.name)
    if group is None:
        return None
    if not group.strip():
        raise OptionError(COMMIT_TO_GROUP.key, group, "is empty", "Give a consumer group id, e.g. orders-stream")
    if JOB.name not in opts:
        raise OptionError(COMMIT_TO_GROUP.key, group, "needs the job option (offsets_db is the source of truth)",
                          "Add .option('job', 'NAME')")
    return group


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [o for o in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if o.name in opts]
    if len(given) != 1:
        raise OptionError("/".join(o.key for o in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)),
                          ", ".join(o.key for o in given) or None,
                          f"exactly one of the three is needed, {len(given)} given",
                          "Keep exactly one: subscribe='t1,t2', subscribePattern='t.*' or assign='{\"t1\": [0, 1]}'")
    option = given[0]
    value = opts[option.name]
    if option is SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(SUBSCRIBE.key, value, "names no topic", "Give comma-separated topic names")
        return Subscribe(topics)
    if option is SUBSCRIBE_PATTERN:
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(SUBSCRIBE_PATTERN.key, value, f"is not a valid regular expression ({exc})",
                              "Fix the pattern, e.g. 'orders-.*'") from None
        return SubscribePattern(value)
    parsed = _json(value, ASSIGN.key, 'e.g. {"orders": [0, 1]}')
    if not isinstance(parsed, dict) or not all(isinstance(ps, list) for ps in parsed.values()):
        raise OptionError(ASSIGN.key, value, "must map each topic to a list of partition numbers",
                          'Write it as {"orders": [0, 1]}')
    for topic, ps in parsed.items():
        for p in ps:
            if not json_int(p) or p < 0:
                raise OptionError(ASSIGN.key, value, f"partition {json.dumps(p)} of {topic} is not a partition number "
                                  "(a JSON integer >= 0)", 'Write it as {"orders": [0, 1]}')
    return Assign(tuple(TopicPartition(t, p) for t, ps in parsed.items() for p in ps))


def _spec(opts: dict[str, str], options: tuple[Option, Option, Option], side: str, *, default: OffsetSpec,
          bounded: bool) -> OffsetSpec:
    """`options` are the side's timestamp, offsets-by-timestamp and offsets: the first given wins (Spark's order)."""
    timestamp, by_timestamp, offsets = options
    if timestamp.name in opts:
        return GlobalTimestamp(_nonneg_int(opts[timestamp.name], timestamp.key, "epoch milliseconds"))
    if by_timestamp.name in opts:
        name, raw = by_timestamp.key, opts[by_timestamp.name]
        pairs = per_partition(raw, name)
        for tp, v in pairs:
            if not json_int(v) or v < 0:
                raise OptionError(name, raw, f"timestamp {json.dumps(v)} of {tp} is not epoch milliseconds (a JSON "
                                  "integer >= 0)", f'Write it as {{"{tp.topic}": {{"{tp.partition}": 1700000000000}}}}')
        return TimestampByPartition(tuple(pairs))
    if offsets.name not in opts:
        return default
    return parse_spec(opts[offsets.name], offsets.key, side=side, bounded=bounded)


def _group_start(opts: dict[str, str], streaming: bool) -> GroupOffsets | None:
    """startingGroup: a stream's start at a consumer group's committed offsets, alone of the starting options."""
    raw = opts.get(STARTING_GROUP.name)
    if raw is None:
        return None
    if not streaming:
        raise OptionError(STARTING_GROUP.key, raw, "is a stream's start, not a bounded read's",
                          "Give spark.read startingOffsets (per-partition JSON) instead")
    others = [o.key for o in (STARTING_OFFSETS, STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP) if o.name in opts]
    if others:
        raise OptionError(STARTING_GROUP.key, raw, f"is given with {', '.join(others)}: a stream has one start",
                          f"Keep {STARTING_GROUP.key} or the other, not both")
    if not raw.strip():
        raise OptionError(STARTING_GROUP.key, raw, "names no consumer group", "Give the group's name, e.g. "
                          "connect-my-sink (a Kafka Connect sink's group is connect-<connector name>)")
    return GroupOffsets(raw.strip())


def _json(raw: str, name: str, example: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(name, raw, f"is not valid JSON ({exc.msg} at column {exc.colno})",
                          f"Fix the JSON, {example}") from None


def _positive(opts: dict[str, str], option: Option) -> int | None:
    raw = option.raw(opts)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(option.key, raw, "is not a whole number", "Give a positive integer, e.g. 10000") from None
    if value <= 0:
        raise OptionError(option.key, raw, "must be positive", "Give a positive integer, e.g. 10000")
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
        raise OptionError(MAX_TRIGGER_DELAY.key, raw, "is not a duration", "Use e.g. 500ms, 30s, 15m or 1h")
    return ms


def _default_db_url() -> str:
    """The stack's offsets_db. Imported here, not at the top: Spark's read tasks import this module, and the
    settings' import (pydantic-settings) would cost every cold Python worker most of a second."""
    from streamfill.settings import default_db_url

    return default_db_url()

"""Every option of the `streamfill_kafka` source, declared once: its key, default and the row of docs/connectors.md
that explains it (`make docs-options` writes the table)."""

from __future__ import annotations

from streamfill.declarations import Option

KAFKA_BOOTSTRAP_SERVERS = Option(
    "kafka.bootstrap.servers", required=True, group="kafka",
    doc='passed to librdkafka (`kafka.isolation.level` defaults to `read_committed`: aborted transactions are '
        'never returned; the fetch defaults are `max.partition.fetch.bytes` 2 MiB, `fetch.max.bytes` 64 MiB, '
        '`fetch.queue.backoff.ms` 10 and `fetch.wait.max.ms` 50, measured in [Benchmarks](benchmarks.md)). '
        "Planning's requests to the broker (topics, offsets) wait at most `kafka.socket.timeout.ms` when given, "
        'else 30 s. `kafka.enable.auto.commit`, `kafka.auto.offset.reset`, `kafka.key.deserializer` and '
        '`kafka.value.deserializer` are refused: offsets come from the plan, and the values are bytes. '
        '`kafka.group.id` names the reader\'s consumer group (default `streamfill-reader`), which assigns its '
        'partitions and never commits.')
KAFKA_PROPERTIES = Option("kafka.*", group="kafka")  # every other `kafka.` option goes to librdkafka as it is
SUBSCRIBE = Option(
    "subscribe", group="subscription", label="`subscribe` / `subscribePattern` / `assign`",
    doc='exactly one: comma-separated topics, a regex (evaluated again at every micro-batch), or JSON `{"topic": '
        '[0, 1]}`. An unknown topic or partition fails before any task runs.')
SUBSCRIBE_PATTERN = Option("subscribePattern", group="subscription")
ASSIGN = Option("assign", group="subscription")
STARTING_OFFSETS = Option(
    "startingOffsets",
    doc='`earliest`, `latest` (streams only) or JSON `{"topic": {"0": 42, "1": -2}}` (-2 earliest, -1 latest). '
        'Default: `latest` for streams, `earliest` for `spark.read`.')
ENDING_OFFSETS = Option(
    "endingOffsets",
    doc='`spark.read` only: `latest` or JSON (-1 latest). On a stream it is an error: use `Trigger.AvailableNow`.')
STARTING_TIMESTAMP = Option(
    "startingTimestamp", group="timestamp",
    doc='epoch ms for every partition, resolved with offsets-for-times; they take precedence over '
        "`*OffsetsByTimestamp`, which take precedence over `*Offsets` (Spark's order).")
ENDING_TIMESTAMP = Option("endingTimestamp", group="timestamp")
STARTING_OFFSETS_BY_TIMESTAMP = Option(
    "startingOffsetsByTimestamp", group="by timestamp",
    doc='JSON `{"topic": {"0": 1700000000000}}`. A timestamp newer than every record resolves to the log end (an '
        'empty range), not an error.')
ENDING_OFFSETS_BY_TIMESTAMP = Option("endingOffsetsByTimestamp", group="by timestamp")
STARTING_GROUP = Option(
    "startingGroup",
    doc="streams only, instead of the other starting options: the committed offsets of this Kafka consumer group, "
        "each the next record to read (where a stopped Kafka Connect sink left off; see "
        "[From Kafka Connect](from-connect.md)). A partition the group has no offset for starts at its earliest "
        "offset, as a Connect sink's does, and the driver logs it. Read once, when the stream has neither a "
        "checkpoint nor a position in offsets_db; with `job`, the offsets read are the job's position at once, "
        "before any batch. Refused while the group has live members (a running connector), when it has no "
        "committed offset for any partition read (a misspelt group), or when this client may not describe the "
        "group. An entry's `start: group:NAME` (or `--start group:NAME`) sets it.")
STRICT_OFFSETS = Option(
    "strictOffsets", default="false",
    doc='`{default}` (default): partitions a per-partition JSON leaves out get `earliest` as a start and `latest` '
        "as an end. `true`: Spark's behaviour, such a JSON fails the query. **This differs from Spark on "
        'purpose**: a new partition should not break a job whose JSON was written before it existed.')
MAX_OFFSETS_PER_TRIGGER = Option(
    "maxOffsetsPerTrigger",
    doc='at most this many offsets per micro-batch, shared among partitions in proportion to their backlog; '
        'never exceeded.')
MAX_TRIGGER_DELAY = Option("maxTriggerDelay", default="15m", group="admission")
MIN_OFFSETS_PER_TRIGGER = Option(
    "minOffsetsPerTrigger", group="admission",
    doc=f'skip a trigger while fewer offsets are waiting, but never longer than `{MAX_TRIGGER_DELAY.key}` (default '
        f'`{MAX_TRIGGER_DELAY.default}`).')
MIN_PARTITIONS = Option(
    "minPartitions", group="splitting",
    doc='split large ranges into more Spark tasks (proportional to size), and cap the records of one task.')
MAX_RECORDS_PER_PARTITION = Option("maxRecordsPerPartition", group="splitting")
MAX_PARTITIONS = Option(
    "maxPartitions",
    doc='at most this many Spark tasks per batch: ranges are packed together, largest first into the task with '
        'the fewest records (a task never grows past `maxRecordsPerPartition`). Unset: one task per range, as '
        "Spark's Kafka source. On a local master `streamfill stream` sets it to Spark's default parallelism (the "
        "cores it has), so a small micro-batch pays each task's start-up once per core rather than once per "
        'partition; on a cluster, whose cores change as executors come and go, it leaves it unset.')
FAIL_ON_DATA_LOSS = Option(
    "failOnDataLoss", default="true",
    doc='`{default}` (default): an error that names topic, partition and the lost offsets. `false`: the loss is '
        'logged as a warning on the driver or executor, stored in `data_loss_events` with its batch when the '
        'source has a `job`, and reading continues from the first available offset.')
INCLUDE_HEADERS = Option("includeHeaders", default="false", doc='add the `headers` column.')
POLL_TIMEOUT_MS = Option(
    "kafkaConsumer.pollTimeoutMs", default="120000",
    doc='how long a task waits without progress before it fails naming the bootstrap servers, topic, partition '
        'and time waited (default {default}).')
JOB = Option(
    "job",
    doc='record every planned range in offsets_db under this name (letters, digits, `_`, `-`, `.`); a stream '
        "without a Spark checkpoint resumes from the job's snapshot. A job's first launch that starts elsewhere "
        "than `earliest` keeps the start it resolved as the job's snapshot at once, before any batch. See "
        '[Exactly-once into Postgres](connectors.md#exactly-once-into-postgres-streamfill_postgres).')
OFFSETS_DB_URL = Option("offsetsDbUrl", doc="where the job's offsets live (default `STREAMFILL_DB_URL`).")
WAIT_FOR_JOB = Option(
    "waitForJob", default="0",
    doc='with `job`: while another launch holds the job, wait this long (`30s`, `10m`) for it to end instead of '
        'failing at once (default `{default}`). See [Guarantees](guarantees.md).')
JOB_GENERATION = Option(
    "jobGeneration",
    doc='with `job`: the generation of a hold on the job taken before the query started '
        '(`streamfill.connectors.spark.hold_job`; `streamfill stream` and `backfill` set it on the source and '
        "the sink). Needed by a bounded read; a stream's source without it takes the job itself for the query's "
        'life.')
JOB_RUN = Option(
    "jobRun",
    doc="with `job`, a stream's source without `jobGeneration`: the offsets_db `runs` row of the launch that "
        "started the query, named in the job's lease the source takes, so a query running detached from its "
        "launch (on a Spark Connect server) shows as that run.")
JSON_COLUMNS = Option(
    "jsonColumns",
    doc='JSON `{"columns": [{"name": "amount", "field": "amount", "type": "decimal(12,2)", "required": true, '
        '"min": "0.00"}, ...], "reserved": ["_corrupt"]}`: the value is a JSON object, and the read types these '
        "top-level fields itself (msgspec and Arrow in the task) where the result cannot differ from Spark's own "
        'parse. It adds `_parsed` (true: typed, and every rule given passed) and `_p_<name>` for each column to '
        'the schema. Pipelines set it (`streamfill.spark_jobs.pipelines.typed_in_read.reader_options`); see "Typed in '
        'the read" under [Your own pipeline](pipelines.md#your-own-pipeline). Types: string, int, bigint, '
        'double, decimal(p,s), boolean, date, timestamp; rules: `required`, `min` and `max` (as Spark casts the '
        'bound: a number, decimal text, epoch days for a date, epoch microseconds for a timestamp), `in` (texts '
        'or whole numbers), `max_length`. A record any rule rejects is left to Spark (`_parsed` false), which '
        'gives the reason.')
COMMIT_TO_GROUP = Option(
    "commitToGroup",
    doc='with `job`: after each batch commits in offsets_db, commit the same offsets to this Kafka consumer '
        'group, so `kafka-consumer-groups.sh --describe`, Burrow or a lag exporter see the job. offsets_db stays '
        'the source of truth; the group is never read. On a secured cluster (SASL, TLS, mTLS) offsets_db keeps '
        "the client's settings without its secrets, and the committing process (the Spark driver) takes them "
        'from its own `STREAMFILL_KAFKA_*` settings, only when those name the same cluster and user. The launch '
        'is refused before anything is recorded when that environment lacks a secret the read uses, when the '
        'user may not READ the group, or when the group has live consumers; a mirror that fails during the run '
        "for a passing reason is logged, and the next commit brings the group up to date. An entry's "
        "`commit_to_group` sets it for the entry's stream.")

# the docs table's order
SOURCE_OPTIONS = (KAFKA_BOOTSTRAP_SERVERS, KAFKA_PROPERTIES, SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN, STARTING_OFFSETS,
                  ENDING_OFFSETS, STARTING_TIMESTAMP, ENDING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP,
                  ENDING_OFFSETS_BY_TIMESTAMP, STARTING_GROUP, STRICT_OFFSETS, MAX_OFFSETS_PER_TRIGGER,
                  MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION, MAX_PARTITIONS,
                  FAIL_ON_DATA_LOSS,
                  INCLUDE_HEADERS, POLL_TIMEOUT_MS, JOB, OFFSETS_DB_URL, WAIT_FOR_JOB, JOB_GENERATION, JOB_RUN,
                  JSON_COLUMNS,
                  COMMIT_TO_GROUP)

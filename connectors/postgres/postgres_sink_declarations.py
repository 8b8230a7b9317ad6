"""Every option of the `streamfill_postgres` sink, declared once: its key, default and the row of
docs/connectors.md that explains it (`make docs-options` writes the table)."""

from __future__ import annotations

from streamfill.declarations import Option

TABLE = Option(
    "table", required=True,
    doc="`name` or `schema.name`. Created from the DataFrame's columns when missing, as a plain table (Spark "
        'types map to `text`, `bytea`, `bigint`, `numeric(p,s)`, `timestamptz`, ...; arrays, structs and maps to '
        '`jsonb`, their bytes as hex) with a unique index on the key, its fixed-width columns first '
        '(`(partition, offset, topic)` for the default key: the same uniqueness, and PostgreSQL maintains it '
        'faster, since comparing index columns that follow a text column means walking the tuple). An existing '
        'table is used as it is (see [The table is yours](guarantees.md#the-table-is-yours)): it must have every '
        'column the DataFrame writes and a unique index on the key (the error gives the `CREATE UNIQUE INDEX` to '
        'run).')
KEY_COLUMNS = Option(
    "keyColumns",
    doc='the unique key, default `topic,partition,offset`.')
MODE = Option(
    "mode",
    doc='`append-new` (default): rows whose key exists are kept. `replace`: they are updated (upsert) by the '
        "newest version of the key. Within one topic-partition the higher offset is the newer, whatever the "
        "timestamps say (Kafka's order, which compaction keeps). Between partitions (a key moved to a partition "
        "added later, two topics into one table) the `versionColumn` decides first when there is one (a row "
        "with a `source_position` column, a change event's position in its database's log, has it as its "
        "version column), then the later Kafka timestamp, a missing value older than any present one, then the "
        "higher topic, partition and offset (the columns `kafka_timestamp`, or Spark's `timestamp`, and "
        "`topic`, `partition`, `offset`; a write with `job` needs them).")
VERSION_COLUMN = Option(
    "versionColumn",
    doc="mode `replace`: a column of the DataFrame, a number, date or time, that orders a key's versions between "
        "partitions before the Kafka timestamp (within one partition the offset decides). Default "
        "`source_position` where the DataFrame has that column, else none.")
JOB = Option(
    "job",
    doc="the same name as the source's `job`: the batch's rows, offsets and the job's resume snapshot commit in "
        'one transaction. Without it the write is still atomic (one transaction), but no offsets are committed.')
JOB_GENERATION = Option(
    "jobGeneration",
    doc="as the source's: the commit is refused (`Fenced`) once that launch no longer holds the job. Needed by a "
        'bounded write with `job`. A stream into `streamfill_postgres` needs `job`.')
ENDING_OFFSETS = Option(
    "endingOffsets",
    doc='a bounded write with `job`: JSON `{"topic": {"0": 1200}}`, the offsets its read ends at, as numbers '
        "(not `latest`), every partition of the read named. The commit takes the job's newest batch planned to "
        'end exactly there, which must start where the job stands (refused otherwise, nothing committed), so a '
        'launch may plan its next read before this write commits, as `streamfill backfill` does. Without it the '
        "commit takes the job's newest planned batch.")
URL = Option(
    "url",
    doc='SQLAlchemy URL of the database (default `STREAMFILL_DB_URL`). With `job`, offsets_db must live in the '
        'same database (`streamfill db upgrade` against it).')
DEAD_LETTERS = Option(
    "deadLetters", default="false",
    doc="`true`: a row whose `_error` column is not null is not written to the table but to offsets_db's "
        '`dead_letters` (topic, partition, offset, `_raw` as its raw value, `_error` as the reason), once per '
        'job and offset, in the same transaction. Needs `job` and the columns `_error`, `_raw`, `topic`, '
        "`partition`, `offset`, as a pipeline's parse makes them (`spark_jobs/pipelines/compile.py`).")
COLUMN_TYPES = Option(
    "columnTypes",
    doc='JSON `{"column": "jsonb"}`: PostgreSQL types for columns whose Spark type alone does not say (JSON text '
        'kept as jsonb); one of text, integer, bigint, double precision, numeric(p,s), boolean, date, '
        'timestamptz, jsonb, bytea.')
EVOLVE_SCHEMA = Option(
    "evolveSchema", default="false",
    doc='`true` (what pipelines use): an existing table must have every written column with its declared type '
        '(refused otherwise, with the `ALTER TABLE` to run); a column it lacks is added, nullable; columns not '
        'written are reported and left.')
DELETES = Option(
    "deletes", default="false",
    doc="`true`: a row whose boolean `_delete` column is true deletes its key's row instead of being written (a "
        "tombstone, a change event's `d`; a pipeline's parse makes the column). Needs mode `replace`, "
        "`keyColumns` of the record's own and the version columns. A delete is a version like any other: it "
        "removes the row when the row is not newer, and the key is recorded in offsets_db's `deleted_keys` with "
        'that version, so an older version replayed later (a backfill, a replay, another job) never brings the '
        'row back; a newer one does. Rows with a null key delete nothing (a change event the entry ignores); a '
        'null `_delete` is an upsert. Every writer of such a table needs `deletes`: one without it does not read '
        "`deleted_keys`, so a write without it into a table with deletes recorded is refused, naming the table, at "
        "its plan (before anything is recorded) and at its commit. Deleting commits into one table take turns (an "
        "advisory lock to the commit's end, waited for as long as the other commit takes). A batch without deletes, "
        "into a table with none recorded (none yet, or all pruned: `STREAMFILL_RETAIN_DELETED_KEYS`), moves as a "
        "plain upsert. The job's role needs `DELETE` on the table.")
ROUTES = Option(
    "routes",
    doc='JSON `{"orders": {"columns": [...], "key": [...], "mode": "replace", "columnTypes": {...}}, "refunds": '
        '{...}}`: one write into several tables. Each row goes to the table its `_route` column names, with that '
        "table's columns, key and mode; every table's rows, the dead letters and the offsets commit in one "
        'transaction (the tables locked in name order). `key` defaults to the Kafka coordinates, `mode` to '
        "`append-new`; `table`, `keyColumns`, `mode` and `columnTypes` of the write are its first table's. A "
        "valid row whose `_route` names no table fails the task (a pipeline's parse sends such records to a "
        'table or to the dead letters).')

# the docs table's order
SINK_OPTIONS = (TABLE, KEY_COLUMNS, MODE, VERSION_COLUMN, JOB, JOB_GENERATION, ENDING_OFFSETS, URL, DEAD_LETTERS,
                COLUMN_TYPES, EVOLVE_SCHEMA, DELETES, ROUTES)

"""Every option of the `streamfill_postgres` sink, parsed and validated once, on the driver, before it connects.

Plain Python over the option strings and the DataFrame's column names: no Spark, no database. What a batch
does with them (the table's checks, the stage, the commit) lives beside it in `target`, `stage` and `move`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION
from streamfill.connectors.postgres.postgres_sink_declarations import (
    COLUMN_TYPES,
    DEAD_LETTERS,
    DELETES,
    ENDING_OFFSETS,
    EVOLVE_SCHEMA,
    JOB,
    JOB_GENERATION,
    KEY_COLUMNS,
    MODE,
    ROUTES,
    TABLE,
    URL,
    VERSION_COLUMN,
)
from streamfill.declarations import boolean, job_generation
from streamfill.errors import OptionError
from streamfill.names import parse_table, validate_job_name
from streamfill.partitions import Positions, from_json_shape

# the sink's modes, the default first: append-new keeps the row whose key exists, replace upserts; the jobs file,
# the backfill's --mode, the replay form and the CLI take these
SinkMode = Literal["append-new", "replace"]
MODES: tuple[str, ...] = get_args(SinkMode)
APPEND_NEW, REPLACE = MODES
KAFKA_COORDINATES = ("topic", "partition", "offset")
DEFAULT_KEY = KAFKA_COORDINATES
# with dead letters on, these columns are staged but never reach the target: a non-null _error makes the row
# a dead letter (offsets_db.dead_letters) carrying _raw, the record's original value
DEAD_LETTER_COLUMNS = (("_error", "text"), ("_raw", "bytea"))
# Which version of a key wins in mode replace. Within one topic-partition, the higher offset: Kafka orders a
# partition by offset and so does its compaction, while producers' clocks (CreateTime) go back. Between partitions
# (a key moved to a partition added later, two topics into one table), where offsets say nothing about time: the
# declared version first (a version column: a change event's position in its source database's log, so a
# snapshot's record read after a change never overwrites it, or a field of the value), then the later Kafka
# timestamp, a missing value older than any present one, then the higher topic, partition and offset.
# A pipeline's rows carry Kafka's timestamp as kafka_timestamp, Spark's Kafka schema as timestamp; each order ends
# with the coordinates, and the SQL of the rule is connectors.postgres.versions.
TIMESTAMPS = ("kafka_timestamp", "timestamp")
VERSION_ORDERS = ((SOURCE_POSITION, "kafka_timestamp", "topic", "partition", "offset"),
                  ("kafka_timestamp", "topic", "partition", "offset"), ("timestamp", "topic", "partition", "offset"))

# the PostgreSQL types a `columnTypes` option may name (they are written into CREATE TABLE as they are)
_PG_TYPE = re.compile(r"text|integer|bigint|smallint|real|double precision|numeric\(\d{1,2}, ?\d{1,2}\)|boolean|date|"
                      r"timestamptz|timestamp|jsonb|bytea")


@dataclass(frozen=True)
class Route:
    """One table of a routed write: the rows whose `_route` is `name` go to it, with its own columns and rules."""

    name: str  # the table as the write names it (the `_route` value)
    schema: str | None
    table: str
    columns: tuple[str, ...]  # the DataFrame's columns it takes, in order
    key: tuple[str, ...]
    mode: str
    version: tuple[str, ...]
    column_types: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SinkOptions:
    schema: str | None  # None: the first schema of the connection's search_path
    table: str
    mode: str  # one of MODES
    key: tuple[str, ...]  # the unique key rows are kept once by
    version: tuple[str, ...]  # mode replace: the columns that order a key's versions (VERSION_ORDERS), or none
    job: str | None  # with a job, a batch's rows, dead letters and offsets commit in one transaction
    dead_letters: bool  # rows with a non-null _error go to offsets_db's dead_letters, not the table
    evolve: bool  # an existing table gains the columns it lacks (a pipeline's table)
    column_types: Mapping[str, str] = field(default_factory=dict)  # columnTypes: declared PostgreSQL types
    generation: int | None = None  # the launch's hold on the job (jobGeneration), checked at commit
    ends: Positions | None = None  # endingOffsets: the commit takes the batch planned to end there
    url: str | None = None  # None: STREAMFILL_DB_URL
    deletes: bool = False  # rows whose _delete is true delete their key's row (mode replace)
    routes: tuple[Route, ...] = ()  # a routed write: each row to the table its _route names

    @property
    def staged_only(self) -> tuple[str, ...]:
        """Columns the tasks handle that never reach a table."""
        return ((*(n for n, _ in DEAD_LETTER_COLUMNS),) if self.dead_letters else ()) + \
            ((DELETE_COLUMN,) if self.deletes else ()) + ((ROUTE_COLUMN,) if self.routes else ())

    @property
    def tables(self) -> tuple[Route, ...]:
        """Every table the write commits into: its routes, or its one table."""
        return self.routes or (Route(self.table, self.schema, self.table, (), self.key, self.mode, self.version,
                                     self.column_types),)


def parse(options: Mapping[str, str], columns: Sequence[str], *, streaming: bool, writing: bool = True) -> SinkOptions:
    """Validate every option against the DataFrame's `columns`; raise OptionError naming the option, the value
    and the fix. `writing` is False for the check a job makes before it starts (`prepare_table`), which needs no
    hold on the job yet."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    schema, table = parse_table(opts.get(TABLE.name))
    mode = parse_mode(opts.get(MODE.name))
    job = opts.get(JOB.name)
    if job is not None:
        validate_job_name(job)
    dead_letters = boolean(opts, DEAD_LETTERS)
    if dead_letters:
        missing = [n for n in (*(n for n, _ in DEAD_LETTER_COLUMNS), *KAFKA_COORDINATES) if n not in columns]
        if job is None or missing:
            raise OptionError(DEAD_LETTERS.key, opts[DEAD_LETTERS.name], "needs the job option and the columns _error, "
                              f"_raw, topic, partition and offset (missing: {', '.join(missing) or 'none'}; job: "
                              f"{job})", "Build the DataFrame with a pipeline's parse (spark_jobs.pipelines)")
    deletes = boolean(opts, DELETES)
    routed = opts.get(ROUTES.name)
    handled = {*(dict(DEAD_LETTER_COLUMNS) if dead_letters else ()), *((DELETE_COLUMN,) if deletes else ()),
               *((ROUTE_COLUMN,) if routed else ())}
    written = [c for c in columns if c not in handled]
    version_column = opts.get(VERSION_COLUMN.name)
    routes = _routes(routed, written, columns, version_column) if routed else ()
    if routes:  # the write's own table, key and mode are its first route's
        schema, table, mode = routes[0].schema, routes[0].table, routes[0].mode
        written = list(routes[0].columns)
    key = parse_key(opts.get(KEY_COLUMNS.name), written) if not routes else routes[0].key
    version = version_order(written, version_column) if mode == REPLACE else ()
    if version_column is not None and REPLACE not in ([r.mode for r in routes] or [mode]):
        raise OptionError(VERSION_COLUMN.key, version_column, f"orders the versions of a key, which only mode "
                          f"replace keeps (mode: {mode})", "Write with mode=replace, or leave versionColumn out")
    if deletes:
        _check_deletes(opts[DELETES.name], mode, key, version, columns, routes)
    if mode == REPLACE and job is not None and not version:
        raise OptionError(MODE.key, "replace", "needs Kafka's timestamp, topic, partition and offset columns in the "
                          "DataFrame to tell which version of a key is the newest (the later Kafka timestamp wins, "
                          "then the higher topic, partition and offset)",
                          "Keep the columns kafka_timestamp (or timestamp), topic, partition and offset")
    bounded = job is not None and not streaming and writing
    why = "a bounded write with a job: without it the commit could not tell this write's batch from another launch's"
    generation = job_generation(opts, JOB_GENERATION, job, why if bounded else None)
    if job is None and streaming:
        raise OptionError(JOB.key, None, "is needed by a stream into streamfill_postgres (each micro-batch commits "
                          "with the job's offsets)", "Give the source and the sink the same .option('job', NAME)")
    return SinkOptions(schema=schema, table=table, mode=mode, key=key, version=version, job=job,
                       dead_letters=dead_letters, evolve=boolean(opts, EVOLVE_SCHEMA),
                       column_types=_column_types(opts.get(COLUMN_TYPES.name), written), generation=generation,
                       ends=_ending_offsets(opts, job, streaming), url=opts.get(URL.name) or None,
                       deletes=deletes, routes=routes)


def _check_deletes(raw: str, mode: str, key: Sequence[str], version: Sequence[str], columns: Sequence[str],
                   routes: Sequence[Route]) -> None:
    """A write that deletes: mode replace, a key of its own, versions to order deletes with upserts, _delete."""
    fix = "Write with mode=replace, keyColumns naming the record's key, and a boolean _delete column"
    if routes:
        raise OptionError(DELETES.key, raw, "does not combine with routes", "Delete from one table per write")
    if mode != REPLACE:
        raise OptionError(DELETES.key, raw, f"needs mode replace, not {mode}", fix)
    if tuple(key) == DEFAULT_KEY:
        raise OptionError(DELETES.key, raw, "needs a key of the record's own (keyColumns): with the default key "
                          "(topic, partition, offset) no two records share a row, so nothing could be deleted", fix)
    if not version or DELETE_COLUMN not in columns:
        raise OptionError(DELETES.key, raw, "needs the column _delete and Kafka's timestamp, topic, partition and "
                          f"offset columns (to order a delete with the key's versions); columns: {', '.join(columns)}",
                          fix)


def _routes(raw: str, written: Sequence[str], columns: Sequence[str], version_column: str | None
            ) -> tuple[Route, ...]:
    """`routes`: JSON {table: {"columns": [...], "key": [...], "mode": ..., "columnTypes": {...}}}, each row going
    to the table its _route column names."""
    fix = ('Write it as {"orders": {"columns": ["topic", "partition", "offset", "order_id"], "key": ["order_id"], '
           '"mode": "replace"}}, with a _route column naming each row\'s table')
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(ROUTES.key, raw, f"is not valid JSON ({exc.msg})", fix) from None
    if not isinstance(parsed, dict) or not parsed or ROUTE_COLUMN not in columns:
        raise OptionError(ROUTES.key, raw, "needs at least one table and a _route column", fix)
    routes = []
    for name, about in parsed.items():
        if not isinstance(about, dict) or not isinstance(about.get("columns"), list):
            raise OptionError(ROUTES.key, raw, f"table {name!r} does not list its columns", fix)
        schema, table = parse_table(name)
        taken = tuple(about["columns"])
        missing = [c for c in taken if c not in written]
        if missing:
            raise OptionError(ROUTES.key, raw, f"table {name!r} takes column(s) {', '.join(missing)} the DataFrame "
                              f"does not have (columns: {', '.join(written)})", fix)
        mode = parse_mode(about.get("mode"))
        key = parse_key(",".join(about["key"]) if about.get("key") else None, taken)
        version = version_order(taken, version_column) if mode == REPLACE else ()
        if mode == REPLACE and not version:
            raise OptionError(ROUTES.key, raw, f"table {name!r} is in mode replace without Kafka's timestamp, topic, "
                              "partition and offset columns to order a key's versions", fix)
        types = _column_types(json.dumps(about["columnTypes"]), taken) if about.get("columnTypes") else {}
        routes.append(Route(name, schema, table, taken, key, mode, version, types))
    return tuple(routes)


def parse_mode(raw: str | None) -> str:
    mode = (raw or MODES[0]).strip().lower()
    if mode not in MODES:
        raise OptionError(MODE.key, raw, "is not a sink mode",
                          "Use append-new (keep rows whose key exists) or replace (upsert)")
    return mode


def parse_key(raw: str | None, columns: Sequence[str]) -> tuple[str, ...]:
    key = tuple(c.strip() for c in raw.split(",") if c.strip()) if raw else DEFAULT_KEY
    missing = [c for c in key if c not in columns]
    if missing:
        if raw:
            raise OptionError(KEY_COLUMNS.key, raw, f"column(s) {', '.join(missing)} are not in the DataFrame "
                              f"(columns: {', '.join(columns)})", "Name columns that exist")
        raise OptionError(KEY_COLUMNS.key, raw, f"the DataFrame has no {', '.join(missing)} column(s) for the default "
                          "unique key (topic, partition, offset)",
                          "Keep those columns or set keyColumns, e.g. .option('keyColumns', 'event_id')")
    return key


def version_order(columns: Sequence[str], version_column: str | None = None) -> tuple[str, ...]:
    """The columns that order a key's versions: `version_column` (versionColumn) before the first Kafka timestamp
    and the coordinates the rows have, else the first of VERSION_ORDERS whose columns the rows all have; () when
    they have none of them."""
    if version_column is None:
        return next((order for order in VERSION_ORDERS if set(order) <= set(columns)), ())
    name = version_column.strip()
    stamp = next((t for t in TIMESTAMPS if t in columns), None)
    fix = "Name a column of the DataFrame that holds a number, a date or a time, besides the Kafka coordinates"
    if name not in columns or name in (*TIMESTAMPS, *KAFKA_COORDINATES):
        raise OptionError(VERSION_COLUMN.key, version_column, f"is not a column of the DataFrame that can order "
                          f"versions (columns: {', '.join(columns)})", fix)
    if stamp is None or not set(KAFKA_COORDINATES) <= set(columns):
        raise OptionError(VERSION_COLUMN.key, version_column, "needs the Kafka timestamp, topic, partition and "
                          "offset columns beside it (within a partition the offset decides)", fix)
    return name, stamp, *KAFKA_COORDINATES


def _ending_offsets(opts: dict, job: str | None, streaming: bool) -> Positions | None:
    """`endingOffsets` of a bounded write with a job: {"topic": {"0": 123}}, the ends its read was given. The
    commit takes the batch planned to end exactly there, so a launch may plan its next batch before this one
    commits (without it, the commit takes the job's newest planned batch)."""
    raw = opts.get(ENDING_OFFSETS.name)
    if raw is None:
        return None
    fix = 'Give the ends the read was given, as {"topic": {"0": 123}}, with the job option, on a df.write'
    if job is None or streaming:
        raise OptionError(ENDING_OFFSETS.key, raw, "is for a bounded write with a job", fix)
    try:
        ends = from_json_shape(json.loads(raw))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise OptionError(ENDING_OFFSETS.key, raw, "is not a JSON object of topics, partitions and offsets",
                          fix) from None
    if not ends or any(tp.partition < 0 or end < 0 for tp, end in ends.items()):
        raise OptionError(ENDING_OFFSETS.key, raw, "needs at least one partition, with offsets of 0 or more", fix)
    return ends


def _column_types(raw: str | None, names: Sequence[str]) -> dict[str, str]:
    """`columnTypes`: JSON {column: PostgreSQL type} for columns whose Spark type alone does not say (json text
    kept as jsonb, a declared numeric(p,s))."""
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(COLUMN_TYPES.key, raw, f"is not valid JSON ({exc.msg})",
                          'Write it as {"meta": "jsonb"}') from None
    if not isinstance(parsed, dict):
        raise OptionError(COLUMN_TYPES.key, raw, "must map column names to types", 'Write it as {"meta": "jsonb"}')
    for name, pg in parsed.items():
        if name not in names:
            raise OptionError(COLUMN_TYPES.key, raw, f"column {name!r} is not in the DataFrame",
                              f"Name columns that exist ({', '.join(names)})")
        if not isinstance(pg, str) or not _PG_TYPE.fullmatch(pg):
            raise OptionError(COLUMN_TYPES.key, raw, f"type {pg!r} of column {name} is not one the sink writes",
                              "Use text, integer, bigint, double precision, numeric(p,s), boolean, date, timestamptz, "
                              "jsonb or bytea")
    return parsed

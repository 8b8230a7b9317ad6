"""One compiler from a pipeline entry to a Spark plan, used by the stream, the backfill, the interval and the
replay: read the value (JSON as text, Avro decoded in Python into the same JSON text, or raw bytes), type every
column explicitly (so a wrong type is a reason, not a silent null), check each rule, add derived columns.

The result has Kafka's coordinates, a Debezium event's `source_position`, the entry's columns (a routed entry's:
every route table's once), the derived columns, `_error` (null for a valid row, else the first rule broken:
`amount above max 1000000: 2500000`) and `_raw` (the value of a dead letter, null otherwise), the two columns
`streamfill_postgres` turns into dead letters; then `_delete` for an entry whose records can delete (a tombstone,
a Debezium event: spark_jobs.pipelines.envelope) and `_route` for a routed one (the table a record goes to,
checked against that table's columns only). Records that PostgreSQL could not store as they are (a NUL
character in text, invalid UTF-8, a number too large for its column) are dead letters too: one bad record never
fails a batch.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamfill.bounded_cache import BoundedCache
from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION, SOURCE_POSITION_TYPE
from streamfill.connectors.kafka.json_values import PARSED, PREFIX
from streamfill.errors import OptionError
from streamfill.spark_jobs.pipelines import envelope
from streamfill.spark_jobs.pipelines.avro import decode_avro
from streamfill.spark_jobs.pipelines.change_batches import decode_changes
from streamfill.spark_jobs.pipelines.columns import COORDINATES
from streamfill.spark_jobs.pipelines.envelope import CORRUPT
from streamfill.spark_jobs.pipelines.jvm_select import select_sent_once
from streamfill.spark_jobs.pipelines.readings import (
    JSON_EXACT,
    JSON_TEXT,
    ROUTE_VALUE,
    Reading,
    raw_field,
    readings_by_column,
    typed_value,
)
from streamfill.spark_jobs.pipelines.routes import DEAD_LETTERS, RouteTable
from streamfill.spark_jobs.pipelines.rule_checks import checks_left_by_the_read, first_error, first_of
from streamfill.spark_jobs.pipelines.spec import PipelineSpec


def _coordinates() -> list[SparkColumn]:
    return [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp").alias("kafka_timestamp")]


def parse(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Kafka's rows (Spark's Kafka schema) into the entry's table rows with `_error` and `_raw`. A read with
    `typed_in_read.reader_options(spec)` brings the values it typed itself (`_parsed`); Spark parses the others."""
    if spec.format == "raw":
        return kafka.select(*_coordinates(), "key", "value", _headers(kafka),
                            F.lit(None).cast("string").alias("_error"),
                            F.lit(None).cast("binary").alias("_raw"))
    try:
        cols = _columns(spec, PARSED in kafka.columns)
        return cols.select(check(kafka, spec), "rows", "out")
    except AnalysisException:
        if not spec.all_derived:
            raise
        raise _bad_derived(check(kafka, spec), spec) from None


def _bad_derived(checked: DataFrame, spec: PipelineSpec) -> Exception:
    """The first `derived` expression Spark cannot parse or resolve over the entry's columns, named with its
    entry (the launch fails before anything is read or recorded)."""
    rows = _columns(spec, derived=False).select(checked, "rows")
    for table in _tables(spec):
        for name, sql in table.derived.items():
            try:
                rows.select(F.expr(sql).alias(name))
            except AnalysisException as exc:
                reason = str(exc).strip().splitlines()[0]
                return OptionError(f"derived.{name}", sql, f"in entry {spec.name!r} is not a Spark SQL expression "
                                   f"over the entry's columns ({', '.join(spec.all_columns)}): {reason}",
                                   "Fix the expression in the jobs file and launch again")
    return OptionError("derived", dict(spec.derived), f"of entry {spec.name!r} do not resolve together",
                       "Check that no derived column refers to another")


def check(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Every record with its typed values and the first rule it breaks (`_error`), rejected ones included:
    what `parse` keeps of valid records, and what tests compare with the rules' expectations."""
    if spec.format == "debezium":  # JSON or Avro change events, read in Python (change_events)
        kafka = decode_changes(kafka, spec)
    elif spec.avro_values:
        kafka = decode_avro(kafka, spec)
    cols = _columns(spec, PARSED in kafka.columns)
    return cols.select(kafka, "change_parsed", "change_unwrapped", "change", "base", "typed", "checked")


@dataclass(frozen=True)
class _Projections:
    """The entry's columns for each projection of `check` and `parse`. They name columns and are bound to no
    DataFrame, so one entry builds them once: a backfill parses every chunk with them, and building them calls
    into the JVM for every column."""

    # an entry that can delete: its key and value parsed, unwrapped, and the document its columns read (envelope)
    change_parsed: tuple[SparkColumn | str, ...]
    change_unwrapped: tuple[SparkColumn | str, ...]
    change: tuple[SparkColumn | str, ...]
    base: tuple[SparkColumn, ...]  # Kafka's coordinates, the value parsed as JSON text
    typed: tuple[SparkColumn | str, ...]  # every column so far, and each column typed once: _c_NAME = struct(raw, v)
    checked: tuple[SparkColumn | str, ...]  # typed values and the first rule broken (_error)
    rows: tuple[SparkColumn | str, ...]  # a dead letter's typed values cleared
    out: tuple[SparkColumn | str, ...]  # derived columns and _raw
    # projection -> the JVM's Seq of its columns (jvm_select), made on first use
    _java: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def select(self, df: DataFrame, *projections: str) -> DataFrame:
        """df.select(*<projection>) for each projection in turn, its columns sent to the JVM once per entry and
        session; an empty projection (an entry that needs none) is skipped."""
        for projection in projections:
            cols = getattr(self, projection)
            if cols:
                df = select_sent_once(df, cols, self._java, projection)
        return df


# (JVM's gateway, parse fields, typed, derived) -> the entry's projections; a process parsing many entries (tests)
# keeps the newest
_built: BoundedCache[Hashable, _Projections] = BoundedCache(32)
_PARSE_FIELDS = {"format", "schema_registry", "columns", "derived", "key", "deletes", "position", "route", "version"}


def _columns(spec: PipelineSpec, typed: bool = False, derived: bool = True) -> _Projections:
    """The entry's projections; `typed`: the read brings `_parsed` and `_p_<column>` (typed_in_read);
    `derived`: with the derived columns (without: to find the one Spark cannot resolve)."""
    from pyspark import SparkContext

    key = (SparkContext._gateway, spec.model_dump_json(include=_PARSE_FIELDS), typed, derived)
    return _built.get(key, lambda: _projections(spec, typed, derived))


def _tables(spec: PipelineSpec) -> list[RouteTable]:
    """The tables the parse fills, each once: a routed entry's route tables, else the entry's table."""
    tables = spec.route_tables() or [RouteTable(None, spec.table, spec.columns, spec.derived, spec.key, spec.mode)]
    once: dict[str, RouteTable] = {}
    for t in tables:  # two route values may name one table (routes.check: with one definition)
        once.setdefault(t.table, t)
    return list(once.values())


def _by_route(values: dict[str, tuple[str, SparkColumn]], tables: list[RouteTable]) -> SparkColumn:
    """The value of the record's table among `values` (table -> (what the value is, the value)); one value
    every table shares needs no CASE."""
    if len(values) == len(tables) and len({what for what, _ in values.values()}) == 1:
        return next(iter(values.values()))[1]
    out = F.lit(None)
    for table, (_, v) in reversed(values.items()):
        out = F.when(F.col(ROUTE_COLUMN) == table, v).otherwise(out)
    return out


def _projections(spec: PipelineSpec, typed_by_reader: bool = False, with_derived: bool = True) -> _Projections:
    tables = _tables(spec)
    reading_of = readings_by_column(tables)
    readings = list({r.alias: r for r in reading_of.values()}.values())
    route, changes = spec.route, spec.can_delete
    position = [SOURCE_POSITION] if spec.format == "debezium" else []
    fields = sorted({r.path.split(".")[0] for r in readings} | ({route.field.split(".")[0]} if route else set()))
    schema = ", ".join(f"`{f}` string" for f in fields) + f", {CORRUPT} string"
    text = F.col(envelope.DOCUMENT) if changes else F.col("value").cast("string")
    original = F.col("_original") if spec.avro_values else F.col("value")  # what a dead letter keeps
    json_fields = sorted({r.path.split(".")[0] for r in readings if r.column.column_type.name == "json"})
    exact = [F.from_json(text, "struct<" + ", ".join(f"`{f}`: variant" for f in json_fields) + ">").alias(JSON_EXACT)] \
        if json_fields else []
    parsed = F.col(PARSED)
    json = F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    change = envelope.projections(spec) if changes else envelope.Projections((), (), ())
    carried = [DELETE_COLUMN, envelope.IGNORED, envelope.CHANGE_ERROR, envelope.POSITION_TEXT,
               envelope.KEY_SOURCE] if changes else []
    # a record the read typed skips from_json, its casts and its checks (CASE evaluates the branch it takes)
    base = (*_coordinates(), F.col("value").alias("_value"), original.alias("_original"),
            (F.when(~parsed, json) if typed_by_reader else json).alias(JSON_TEXT),
            *exact, *([F.col("_avro_error")] if spec.avro_values else []), *map(F.col, carried),
            *([parsed, *(F.col(PREFIX + name) for name in spec.columns)] if typed_by_reader else []))

    def value(r: Reading) -> SparkColumn:
        v = typed_value(raw_field(r.path), r.column, r.path)
        return F.when(parsed, F.col(PREFIX + r.name)).otherwise(v) if typed_by_reader else v

    routing = []
    if route is not None:
        raw_route = raw_field(route.field)
        target = F.lit(None if route.unmatched == DEAD_LETTERS else route.unmatched).cast("string")
        for route_value in reversed(route.tables):
            target = F.when(raw_route == route_value, F.lit(route.target(route_value))).otherwise(target)
        routing = [raw_route.alias(ROUTE_VALUE), target.alias(ROUTE_COLUMN)]
    # typed once, in a projection of their own, so each cast is computed once
    typed = ("*", *(F.struct(raw_field(r.path).alias("raw"), value(r).alias("v")).alias(r.alias) for r in readings),
             *routing)
    error = first_error(spec, tables, reading_of)
    if typed_by_reader:  # the read checked its rules (value_columns.CHECKED); Spark checks the others
        error = F.when(parsed, first_of(checks_left_by_the_read(spec))).otherwise(error)
    union = {name: {t.table: (reading_of[(t.table, name)].alias, reading_of[(t.table, name)].v)
                    for t in tables if name in t.columns} for name in spec.all_columns}
    later = [*([DELETE_COLUMN] if changes else []), *([ROUTE_COLUMN] if route is not None else [])]
    checked = (*COORDINATES, *[F.col(envelope.POSITION_TEXT).cast(SOURCE_POSITION_TYPE).alias(p) for p in position],
               *[_by_route(values, tables).alias(name) for name, values in union.items()],
               error.alias("_error"), "_original", *later)
    valid = F.col("_error").isNull()
    # a delete keeps its key, and its version column (a Debezium `d` event's `before` has it) to be ordered by
    keys = [*envelope.key_columns(spec), *([spec.version_column] if spec.version_column else [])] if changes else []

    def kept(name: str) -> SparkColumn:
        """A dead letter keeps only its bytes and reason: its typed values (a NUL, say) need not be storable;
        a delete keeps only its key and version, and a routed record only its table's columns."""
        keep = valid
        if changes and name not in keys:
            keep = keep & ~F.col(DELETE_COLUMN)
        if len(union[name]) < len(tables):
            keep = keep & F.col(ROUTE_COLUMN).isin(*union[name])
        return F.when(keep, F.col(name)).alias(name)

    rows = (*COORDINATES, *[F.when(valid, F.col(p)).alias(p) for p in position], *map(kept, union),
            "_error", "_original", *later)
    derived = _derived(tables, changes) if with_derived else []
    out = (*COORDINATES, *position, *union, *derived, "_error", F.when(~valid, F.col("_original")).alias("_raw"),
           *([(F.col(DELETE_COLUMN) & valid).alias(DELETE_COLUMN)] if changes else []),
           *([ROUTE_COLUMN] if route is not None else []))
    return _Projections(change.parsed, change.unwrapped, change.change, base, typed, checked, rows, out)


def _derived(tables: list[RouteTable], changes: bool) -> list[SparkColumn]:
    """Each derived column once, by the record's table when tables differ in it; a delete's are null."""
    names = dict.fromkeys(name for t in tables for name in t.derived)
    out = []
    for name in names:
        expr = _by_route({t.table: (t.derived[name], F.expr(t.derived[name])) for t in tables if name in t.derived},
                         tables)
        out.append((F.when(~F.col(DELETE_COLUMN), expr) if changes else expr).alias(name))
    return out


def _headers(kafka: DataFrame) -> SparkColumn:
    if "headers" in kafka.columns:
        return F.col("headers")
    return F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers")


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

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from pyspark.errors import AnalysisException
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION, SOURCE_POSITION_TYPE, TOMBSTONE
from streamfill.connectors.kafka.json_values import CHECKED, OPTION, PARSED, PREFIX, JsonColumns, ValueColumn, can_check
from streamfill.spark_jobs.pipelines import envelope, reasons
from streamfill.spark_jobs.pipelines.columns import COORDINATES
from streamfill.spark_jobs.pipelines.reasons import NUL
from streamfill.spark_jobs.pipelines.routes import DEAD_LETTERS, RouteTable
from streamfill.spark_jobs.pipelines.spec import Column, PipelineSpec
from streamfill.spark_jobs.pipelines.types import NUMERIC
from streamfill.errors import OptionError
from streamfill.rules import BOUNDS, BrokenWhen, Rule, Shown

CORRUPT = envelope.CORRUPT
STRUCT_CORRUPT = "_streamfill_corrupt"  # a struct column's own corrupt-record field, dropped once checked
JSON_TEXT = "_json"  # the value's top-level fields as text (from_json), CORRUPT set when it is not JSON
JSON_EXACT = "_json_exact"  # the top-level fields json columns read, as variants: their exact JSON
ROUTE_VALUE = "_route_value"  # the text of a routed entry's route field


def _coordinates() -> list[SparkColumn]:
    return [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp").alias("kafka_timestamp")]


def parse(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Kafka's rows (Spark's Kafka schema) into the entry's table rows with `_error` and `_raw`. A read with
    `reader_options(spec)` brings the values it typed itself (`_parsed`); Spark parses the others."""
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


def reader_options(spec: PipelineSpec) -> dict[str, str]:
    """The `streamfill_kafka` options that have the read type the entry's JSON values itself where the result is
    certain to be Spark's (connectors.kafka.json_values, less CPU than from_json and the casts);
    none for an entry it cannot type (Avro, raw or Debezium values, a routed entry, nested types, paths into the
    value, a json column, an `in` list of numbers other than whole ones: json_values.can_check). `parse` gives
    the same rows and dead letters either way."""
    columns = _json_columns(spec)
    return {} if columns is None else {OPTION: columns.to_option()}


_typed_columns: dict[tuple[object, str], JsonColumns | None] = {}


def _json_columns(spec: PipelineSpec) -> JsonColumns | None:
    if spec.format != "json" or spec.route is not None:  # a route's rules depend on the record's table
        return None
    fields = [c.field or name for name, c in spec.columns.items()]
    if len(set(fields)) != len(fields) or CORRUPT in fields or any("." in f for f in fields):
        return None
    if not all(can_check(str(c.column_type), spec.rules(name)) for name, c in spec.columns.items()):
        return None
    from pyspark import SparkContext

    key = (SparkContext._gateway, spec.model_dump_json(include={"format", "columns", "key"}))
    with _building:
        if key not in _typed_columns:
            _typed_columns[key] = _with_bounds(spec)
        return _typed_columns[key]


def _with_bounds(spec: PipelineSpec) -> JsonColumns:
    """The entry's columns for the reader with the rules it checks, each min and max as Spark casts it (the same
    `_bound` the checks compare with), computed once on the driver from a one-row local relation. A bound Spark
    cannot cast never fires, so the reader does not get it."""
    from pyspark.sql import SparkSession

    bounds = []
    for name, c in spec.columns.items():
        kind = c.column_type.name
        for rule in spec.rules(name):
            if rule.broken_when in BOUNDS:
                bound = _bound(rule.operand, c)
                bound = (F.unix_micros(bound) if kind == "timestamp" else F.unix_date(bound) if kind == "date"
                         else bound.cast("string") if kind == "decimal" else bound)
                bounds.append(bound.alias(f"{rule.key}_{name}"))
    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()  # a backfill's chunk thread
    got = spark.createDataFrame([(0,)], "x int").select(*bounds).first().asDict() if bounds else {}

    def checked_in_read(name: str) -> tuple[Rule, ...]:
        rules = [Rule(r.key, got[f"{r.key}_{name}"]) if r.broken_when in BOUNDS else r
                 for r in spec.rules(name) if r.broken_when in CHECKED]
        return tuple(r for r in rules if r.operand is not None)

    return JsonColumns(tuple(
        ValueColumn(name=name, field=c.field or name, type=str(c.column_type), rules=checked_in_read(name))
        for name, c in spec.columns.items()), reserved=(CORRUPT,))


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
    if spec.avro_values:
        kafka = decode_avro(kafka, spec)
    cols = _columns(spec, PARSED in kafka.columns)
    return cols.select(kafka, "change_parsed", "change_unwrapped", "change", "base", "typed", "checked")


@dataclass(frozen=True)
class _Projections:
    """The entry's columns for each projection of `check` and `parse`. They name columns and are bound to no
    DataFrame, so one entry builds them once: a backfill parses every chunk with them (building them is about
    2,800 calls into the JVM, 0.25 s of the driver's time per chunk)."""

    # an entry that can delete: its key and value parsed, unwrapped, and the document its columns read (envelope)
    change_parsed: tuple[SparkColumn | str, ...]
    change_unwrapped: tuple[SparkColumn | str, ...]
    change: tuple[SparkColumn | str, ...]
    base: tuple[SparkColumn, ...]  # Kafka's coordinates, the value parsed as JSON text
    typed: tuple[SparkColumn | str, ...]  # every column so far, and each column typed once: _c_NAME = struct(raw, v)
    checked: tuple[SparkColumn | str, ...]  # typed values and the first rule broken (_error)
    rows: tuple[SparkColumn | str, ...]  # a dead letter's typed values cleared
    out: tuple[SparkColumn | str, ...]  # derived columns and _raw
    # projection -> the JVM's Seq of its columns, made on first use: PySpark's select sends each column (and each
    # column name) to the JVM in calls of its own, about 90 round trips of py4j per chunk for these projections
    _java: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def select(self, df: DataFrame, *projections: str) -> DataFrame:
        """df.select(*<projection>) for each projection in turn, its columns sent to the JVM once per entry and
        session; an empty projection (an entry that needs none) is skipped."""
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        for projection in projections:
            cols = getattr(self, projection)
            if not cols:
                continue
            if not isinstance(df, ClassicDataFrame):  # Spark Connect: no JVM in this process
                df = df.select(*cols)
                continue
            if projection not in self._java:
                from pyspark.sql.classic.column import _to_java_column, _to_seq

                self._java[projection] = _to_seq(df.sparkSession.sparkContext, cols, _to_java_column)
            df = ClassicDataFrame(df._jdf.select(self._java[projection]), df.sparkSession)
        return df


_built: dict[tuple[object, str, bool, bool], _Projections] = {}  # (JVM's gateway, parse fields, typed, derived)
_building = threading.Lock()  # a backfill builds its chunks in threads
_PARSE_FIELDS = {"format", "schema_registry", "columns", "derived", "key", "deletes", "position", "route"}


def _columns(spec: PipelineSpec, typed: bool = False, derived: bool = True) -> _Projections:
    """The entry's projections; `typed`: the read brings `_parsed` and `_p_<column>` (reader_options);
    `derived`: with the derived columns (without: to find the one Spark cannot resolve)."""
    from pyspark import SparkContext

    key = (SparkContext._gateway, spec.model_dump_json(include=_PARSE_FIELDS), typed, derived)
    with _building:
        if key not in _built:
            if len(_built) >= 32:  # a process parsing many entries (tests) keeps the newest
                _built.pop(next(iter(_built)))
            _built[key] = _projections(spec, typed, derived)
        return _built[key]


@dataclass(frozen=True)
class _Reading:
    """One typed value: column `name` read from the document's field `path`, typed once however many route
    tables have that column from that field."""

    alias: str  # the typed projection's struct(raw, v) of it
    name: str
    column: Column

    @property
    def path(self) -> str:
        return self.column.field or self.name

    @property
    def raw(self) -> SparkColumn:
        return F.col(f"{self.alias}.raw")

    @property
    def v(self) -> SparkColumn:
        return F.col(f"{self.alias}.v")


def _tables(spec: PipelineSpec) -> list[RouteTable]:
    """The tables the parse fills, each once: a routed entry's route tables, else the entry's table."""
    tables = spec.route_tables() or [RouteTable(None, spec.table, spec.columns, spec.derived, spec.key, spec.mode)]
    once: dict[str, RouteTable] = {}
    for t in tables:  # two route values may name one table (routes.check: with one definition)
        once.setdefault(t.table, t)
    return list(once.values())


def _readings(tables: list[RouteTable]) -> dict[tuple[str, str], _Reading]:
    """(table, column) -> the reading the column takes its value from. A column name several tables read from
    one field is typed once; from another field it is a reading of its own (_c1_NAME, ...)."""
    by_field: dict[tuple[str, str], _Reading] = {}
    out = {}
    for t in tables:
        for name, c in t.columns.items():
            path = c.field or name
            if (name, path) not in by_field:
                k = sum(1 for n, _ in by_field if n == name)
                by_field[(name, path)] = _Reading(f"_c_{name}" if k == 0 else f"_c{k}_{name}", name, c)
            out[(t.table, name)] = by_field[(name, path)]
    return out


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
    reading_of = _readings(tables)
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

    def value(r: _Reading) -> SparkColumn:
        v = _typed(_raw_field(r.path), r.column, r.path)
        return F.when(parsed, F.col(PREFIX + r.name)).otherwise(v) if typed_by_reader else v

    routing = []
    if route is not None:
        raw_route = _raw_field(route.field)
        target = F.lit(None if route.unmatched == DEAD_LETTERS else route.unmatched).cast("string")
        for route_value in reversed(route.tables):
            target = F.when(raw_route == route_value, F.lit(route.target(route_value))).otherwise(target)
        routing = [raw_route.alias(ROUTE_VALUE), target.alias(ROUTE_COLUMN)]
    # typed once, in a projection of their own, so each cast is computed once
    typed = ("*", *(F.struct(_raw_field(r.path).alias("raw"), value(r).alias("v")).alias(r.alias) for r in readings),
             *routing)
    error = _first_error(spec, tables, reading_of)
    if typed_by_reader:  # the read checked its rules (json_values.CHECKED); Spark checks the others
        error = F.when(parsed, _first_of(_checks_left_by_the_read(spec))).otherwise(error)
    union = {name: {t.table: (reading_of[(t.table, name)].alias, reading_of[(t.table, name)].v)
                    for t in tables if name in t.columns} for name in spec.all_columns}
    later = [*([DELETE_COLUMN] if changes else []), *([ROUTE_COLUMN] if route is not None else [])]
    checked = (*COORDINATES, *[F.col(envelope.POSITION_TEXT).cast(SOURCE_POSITION_TYPE).alias(p) for p in position],
               *[_by_route(values, tables).alias(name) for name, values in union.items()],
               error.alias("_error"), "_original", *later)
    valid = F.col("_error").isNull()
    keys = envelope.key_columns(spec) if changes else []

    def kept(name: str) -> SparkColumn:
        """A dead letter keeps only its bytes and reason: its typed values (a NUL, say) need not be storable;
        a delete keeps only its key, and a routed record only its table's columns."""
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


def _raw_field(path: str) -> SparkColumn:
    """The field's JSON text: top-level fields come from from_json as text (objects and arrays as their JSON);
    a path such as customer.id goes into that text."""
    first, _, rest = path.partition(".")
    top = F.col(JSON_TEXT).getField(first)
    return F.get_json_object(top, f"$.{rest}") if rest else top


def _typed(raw: SparkColumn, c: Column, path: str) -> SparkColumn:
    t = c.column_type
    if t.name == "string":
        return raw
    if t.name == "json":  # the exact JSON of the field (from_json's text form drops a string's quotes)
        first, _, rest = path.partition(".")
        exact = F.col(JSON_EXACT).getField(first)
        if rest:
            exact = F.try_variant_get(exact, f"$.{rest}", "variant")
        return F.when(exact.isNotNull() & ~F.is_variant_null(exact), F.to_json(exact))
    if t.name == "boolean":
        return F.when(F.lower(raw) == "true", F.lit(True)).when(F.lower(raw) == "false", F.lit(False))
    if t.name == "timestamp":
        return F.try_to_timestamp(raw)
    if t.name == "struct":
        # PERMISSIVE from_json nulls a field whose value does not fit and keeps the rest; a corrupt-record field
        # shows it, so the whole value is "not a struct<...>" (a reason) rather than a struct with silent nulls
        parsed = F.from_json(raw, t.spark[:-1] + f",`{STRUCT_CORRUPT}`:string>",
                             {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": STRUCT_CORRUPT})
        return F.when(parsed.getField(STRUCT_CORRUPT).isNull(), parsed.dropFields(STRUCT_CORRUPT))
    if t.name == "array":
        return F.from_json(raw, t.spark)
    return raw.try_cast(t.spark)


def _first_error(spec: PipelineSpec, tables: list[RouteTable],
                 reading_of: dict[tuple[str, str], _Reading]) -> SparkColumn:
    """The first rule a record breaks, in the order a reader checks: the value as a whole (its change, its
    route), then each column of its table in the table's order (required, type, storable, min, max, in,
    pattern, max_length); a delete checks only its key. An ignored record breaks nothing."""
    value = F.col("_value")
    checks: list[tuple[SparkColumn, SparkColumn]] = []
    if not spec.can_delete:  # a null value of an entry that can delete is a tombstone
        checks.append((value.isNull(), F.lit("empty value")))
    if spec.avro_values:
        checks.append((F.col("_avro_error").isNotNull(), F.col("_avro_error")))
    checks.append((~F.is_valid_utf8(value.cast("string")) | _invalid_utf8(value), F.lit("value is not valid UTF-8")))
    if spec.can_delete:
        checks.append((F.col(envelope.CHANGE_ERROR).isNotNull(), F.col(envelope.CHANGE_ERROR)))
    checks.append((F.col(JSON_TEXT).isNull() | F.col(f"{JSON_TEXT}.{CORRUPT}").isNotNull(), F.lit("invalid JSON")))

    def table_checks(t: RouteTable) -> list[tuple[SparkColumn, SparkColumn]]:
        out = []
        for name, c in t.columns.items():
            r = reading_of[(t.table, name)]
            out += _column_checks(name, c, t.rules(name), r.raw, r.v)
        return out

    if spec.route is None:
        upsert = _first_of(checks + table_checks(tables[0]))
    else:
        by_table = F.lit(None).cast("string")
        for t in reversed(tables):
            by_table = F.when(F.col(ROUTE_COLUMN) == t.table, _first_of(table_checks(t))).otherwise(by_table)
        unrouted = F.concat(F.lit(f"no route for {spec.route.field}: "), reasons.shown(F.col(ROUTE_VALUE)))
        upsert = _first_of([*checks, (F.col(ROUTE_COLUMN).isNull(), unrouted), (F.lit(True), by_table)])
    if not spec.can_delete:
        return upsert
    delete = _first_of(checks + _key_checks(spec, reading_of))
    return F.when(F.col(envelope.IGNORED), F.lit(None).cast("string")).when(F.col(DELETE_COLUMN), delete) \
        .otherwise(upsert)


def _key_checks(spec: PipelineSpec, reading_of: dict[tuple[str, str], _Reading]) -> list[tuple[SparkColumn,
                                                                                                 SparkColumn]]:
    """A delete's checks: each key column is there and of its type, each reason naming where the key came from
    (`tombstone key has no field id`, `before of op d: id is not a bigint: x`)."""
    source = F.col(envelope.KEY_SOURCE)
    out = []
    for name in envelope.key_columns(spec):
        r = reading_of[(spec.table, name)]
        out.append((r.raw.isNull(), F.concat(source, F.lit(f" has no field {r.path}"))))
        out += [(cond, F.concat(source, F.lit(": "), reason))
                for cond, reason in _column_checks(name, r.column, (), r.raw, r.v)]
    return out


def _first_of(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    out = F.lit(None).cast("string")
    for cond, reason in reversed(checks):  # the first rule broken wins
        out = F.when(cond, reason).otherwise(out)
    return out


def _checks_left_by_the_read(spec: PipelineSpec) -> list[tuple[SparkColumn, SparkColumn]]:
    """The rules the read does not check (patterns: Java's regular expressions) of a record it typed. These
    rules apply to string columns, whose typed value is the text Spark's parse would check (a JSON string), so
    the check and the reason are the same."""
    out = []
    for name, c in spec.columns.items():
        v = F.col(f"_c_{name}.v")
        out += [_check(name, c, rule, v, v) for rule in spec.rules(name) if rule.broken_when not in CHECKED]
    return out


def _invalid_utf8(value: SparkColumn) -> SparkColumn:
    """Spark's binary-to-string cast replaces invalid bytes; a round trip that changes the bytes shows them."""
    return F.encode(F.decode(value, "UTF-8"), "UTF-8") != value


def _column_checks(name: str, c: Column, rules: tuple[Rule, ...], raw: SparkColumn,
                   v: SparkColumn) -> list[tuple[SparkColumn, SparkColumn]]:
    """The column's checks in order: required, its type, what PostgreSQL can store, then its other rules."""
    t = c.column_type
    shown = reasons.shown(raw)
    out = [_check(name, c, rule, raw, v) for rule in rules if not rule.on_typed_value]
    if t.name in NUMERIC:
        number = raw.rlike("^-?[0-9]+$") if t.name in ("int", "bigint") else raw.try_cast("double").isNotNull()
        too_large = raw.isNotNull() & v.isNull() & number
        out.append((too_large, F.concat(F.lit(f"{name} out of range for {t}: "), shown)))
    if t.name not in ("string", "json"):
        article = "an" if str(t)[0] in "aeiou" else "a"
        out.append((raw.isNotNull() & v.isNull(), F.concat(F.lit(f"{name} is not {article} {t}: "), shown)))
    if t.name == "string" or t.nested:
        nul = F.instr(raw, NUL) > 0
        if t.nested:
            nul = nul | raw.contains("\\u0000")
        out.append((nul, F.lit(f"{name} contains a NUL character (\\u0000), which PostgreSQL cannot store")))
    return out + [_check(name, c, rule, raw, v) for rule in rules if rule.on_typed_value]


# when a value breaks a rule (streamfill.rules), as a Spark condition on the field's text (raw) and its typed value (v)
_BROKEN = {
    BrokenWhen.MISSING: lambda raw, v, c, _: raw.isNull(),
    BrokenWhen.BELOW: lambda raw, v, c, bound: v < _bound(bound, c),
    BrokenWhen.ABOVE: lambda raw, v, c, bound: v > _bound(bound, c),
    BrokenWhen.NOT_IN: lambda raw, v, c, values: ~v.isin(*values),
    BrokenWhen.NO_MATCH: lambda raw, v, c, pattern: ~v.rlike(pattern),
    BrokenWhen.LONGER: lambda raw, v, c, length: F.length(v) > length,
}


def _check(name: str, c: Column, rule: Rule, raw: SparkColumn, v: SparkColumn) -> tuple[SparkColumn, SparkColumn]:
    """The condition that breaks the rule, and the dead letter's reason."""
    reason = F.lit(rule.reason(name))
    if rule.shown is Shown.VALUE:
        reason = F.concat(reason, F.lit(": "), reasons.shown(raw))
    elif rule.shown is Shown.LENGTH:
        reason = F.concat(reason, F.lit(": "), F.length(v).cast("string"), F.lit(" characters"))
    return _BROKEN[rule.broken_when](raw, v, c, rule.operand), reason


def _bound(value, c: Column) -> SparkColumn:
    """min or max as the column's type. Numbers are written out in full: Spark's cast of "1E+2" or "100.0" to
    an int column is null, and a null bound would never fire."""
    if isinstance(value, Decimal):
        value = int(value) if c.column_type.name in ("int", "bigint") else format(value, "f")
    return F.lit(str(value)).try_cast(c.column_type.spark)


def decode_avro(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Avro values decoded in Python (fastavro, inside the read's own tasks) into JSON text, so Avro and JSON share
    one typed path and one set of rules; `_avro_error` says why a value did not decode. Spark's from_avro would
    need the spark-avro jar, which PySpark does not ship; the two were not benchmarked against each other."""
    import json as _json

    from streamfill.spark_jobs.pipelines.registry import client_settings

    schema = _json.loads(spec.avro_schema_path.read_text()) if spec.avro_schema else spec.registry_reader_schema
    wire = spec.wire_format
    registry = client_settings(spec.schema_registry.url) if spec.schema_registry is not None else None
    keys = spec.deletes == TOMBSTONE and registry is not None  # a tombstone's key read by the registry too
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    # a new schema: StructType.add would change the input DataFrame's own
    out_schema = StructType([*kafka.schema.fields, StructField("_avro_error", StringType()),
                             StructField("_original", BinaryType())])

    def decode(batches: Iterator) -> Iterator:
        from streamfill.spark_jobs.pipelines.avro import to_json_batches

        yield from to_json_batches(batches, schema, wire, registry, keys)

    return kafka.mapInArrow(decode, out_schema)

"""One compiler from a pipeline entry to a Spark plan, used by the stream, the backfill, the interval and the
replay: read the value (JSON as text, Avro decoded in Python into the same JSON text, or raw bytes), type every
column explicitly (so a wrong type is a reason, not a silent null), check each rule, add derived columns.

The result has Kafka's coordinates, the entry's columns, `_error` (null for a valid row, else the first rule
broken: `amount above max 1000000: 2500000`) and `_raw` (the value of a dead letter, null otherwise), the two
columns `streamfill_postgres` turns into dead letters. Records that PostgreSQL could not store as they are (a NUL
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

from streamfill.connectors.kafka.json_values import CHECKED, OPTION, PARSED, PREFIX, JsonColumns, ValueColumn, can_check
from streamfill.spark_jobs.pipelines.spec import Column, PipelineSpec
from streamfill.spark_jobs.pipelines.types import NUMERIC
from streamfill.errors import OptionError
from streamfill.rules import BOUNDS, BrokenWhen, Rule, Shown

CORRUPT = "_corrupt"
STRUCT_CORRUPT = "_streamfill_corrupt"  # a struct column's own corrupt-record field, dropped once checked
JSON_TEXT = "_json"  # the value's top-level fields as text (from_json), CORRUPT set when it is not JSON
JSON_EXACT = "_json_exact"  # the top-level fields json columns read, as variants: their exact JSON


def _coordinates() -> list[SparkColumn]:
    return [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp").alias("kafka_timestamp")]
NUL = "\u0000"


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
        if not spec.derived:
            raise
        raise _bad_derived(check(kafka, spec), spec) from None


def reader_options(spec: PipelineSpec) -> dict[str, str]:
    """The `streamfill_kafka` options that have the read type the entry's JSON values itself where the result is
    certain to be Spark's (connectors.kafka.json_values, less CPU than from_json and the casts);
    none for an entry it cannot type (Avro or raw values, nested types, paths into the value, a json column, an
    `in` list of numbers other than whole ones: json_values.can_check). `parse` gives the same rows and dead
    letters either way."""
    columns = _json_columns(spec)
    return {} if columns is None else {OPTION: columns.to_option()}


_typed_columns: dict[tuple[object, str], JsonColumns | None] = {}


def _json_columns(spec: PipelineSpec) -> JsonColumns | None:
    if spec.format != "json":
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
    rows = _columns_without_derived(spec).select(checked, "rows")
    for name, sql in spec.derived.items():
        try:
            rows.select(F.expr(sql).alias(name))
        except AnalysisException as exc:
            reason = str(exc).strip().splitlines()[0]
            return OptionError(f"derived.{name}", sql, f"in entry {spec.name!r} is not a Spark SQL expression over "
                               f"the entry's columns ({', '.join(spec.columns)}): {reason}",
                               "Fix the expression in the jobs file and launch again")
    return OptionError("derived", dict(spec.derived), f"of entry {spec.name!r} do not resolve together",
                       "Check that no derived column refers to another")


def check(kafka: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Every record with its typed values and the first rule it breaks (`_error`), rejected ones included:
    what `parse` keeps of valid records, and what tests compare with the rules' expectations."""
    if spec.format == "avro":
        kafka = decode_avro(kafka, spec)
    cols = _columns(spec, PARSED in kafka.columns)
    return cols.select(kafka, "base", "typed", "checked")


@dataclass(frozen=True)
class _Projections:
    """The entry's columns for each projection of `check` and `parse`. They name columns and are bound to no
    DataFrame, so one entry builds them once: a backfill parses every chunk with them (building them is about
    2,800 calls into the JVM, 0.25 s of the driver's time per chunk)."""

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
        session."""
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        for projection in projections:
            cols = getattr(self, projection)
            if not isinstance(df, ClassicDataFrame):  # Spark Connect: no JVM in this process
                df = df.select(*cols)
                continue
            if projection not in self._java:
                from pyspark.sql.classic.column import _to_java_column, _to_seq

                self._java[projection] = _to_seq(df.sparkSession.sparkContext, cols, _to_java_column)
            df = ClassicDataFrame(df._jdf.select(self._java[projection]), df.sparkSession)
        return df


_built: dict[tuple[object, str, bool], _Projections] = {}  # (the JVM's gateway, the parse fields, typed) -> columns
_building = threading.Lock()  # a backfill builds its chunks in threads


def _columns_without_derived(spec: PipelineSpec, typed: bool = False) -> _Projections:
    return _columns(spec.model_copy(update={"derived": {}}), typed)


def _columns(spec: PipelineSpec, typed: bool = False) -> _Projections:
    """The entry's projections; `typed`: the read brings `_parsed` and `_p_<column>` (reader_options)."""
    from pyspark import SparkContext

    key = (SparkContext._gateway, spec.model_dump_json(include={"format", "columns", "derived", "key"}), typed)
    with _building:
        if key not in _built:
            if len(_built) >= 32:  # a process parsing many entries (tests) keeps the newest
                _built.pop(next(iter(_built)))
            _built[key] = _projections(spec, typed)
        return _built[key]


def _projections(spec: PipelineSpec, typed_by_reader: bool = False) -> _Projections:
    fields = sorted({(c.field or name).split(".")[0] for name, c in spec.columns.items()})
    schema = ", ".join(f"`{f}` string" for f in fields) + f", {CORRUPT} string"
    text = F.col("value").cast("string")
    original = F.col("_original") if spec.format == "avro" else F.col("value")  # what a dead letter keeps
    json_fields = sorted({(c.field or n).split(".")[0] for n, c in spec.columns.items()
                          if c.column_type.name == "json"})
    exact = [F.from_json(text, "struct<" + ", ".join(f"`{f}`: variant" for f in json_fields) + ">").alias(JSON_EXACT)] \
        if json_fields else []
    parsed = F.col(PARSED)
    json = F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    # a record the read typed skips from_json, its casts and its checks (CASE evaluates the branch it takes)
    base = (*_coordinates(), F.col("value").alias("_value"), original.alias("_original"),
            (F.when(~parsed, json) if typed_by_reader else json).alias(JSON_TEXT),
            *exact, *([F.col("_avro_error")] if spec.format == "avro" else []),
            *([parsed, *(F.col(PREFIX + name) for name in spec.columns)] if typed_by_reader else []))

    def value(name: str, c: Column) -> SparkColumn:
        v = _typed(_raw_field(c.field or name), c, c.field or name)
        return F.when(parsed, F.col(PREFIX + name)).otherwise(v) if typed_by_reader else v

    # typed once, in a projection of their own, so each cast is computed once
    typed = ("*", *(F.struct(_raw_field(c.field or name).alias("raw"), value(name, c).alias("v")).alias(f"_c_{name}")
                    for name, c in spec.columns.items()))
    error = _first_error(spec)
    if typed_by_reader:  # the read checked its rules (json_values.CHECKED); Spark checks the others
        error = F.when(parsed, _first_of(_checks_left_by_the_read(spec))).otherwise(error)
    checked = ("topic", "partition", "offset", "kafka_timestamp",
               *[F.col(f"_c_{name}.v").alias(name) for name in spec.columns], error.alias("_error"), "_original")
    valid = F.col("_error").isNull()
    # a dead letter keeps only its bytes and reason: its typed values (a NUL, say) need not be storable
    rows = ("topic", "partition", "offset", "kafka_timestamp",
            *[F.when(valid, F.col(name)).alias(name) for name in spec.columns], "_error", "_original")
    derived = [F.expr(sql).alias(name) for name, sql in spec.derived.items()]
    out = ("topic", "partition", "offset", "kafka_timestamp", *spec.columns, *derived, "_error",
           F.when(~valid, F.col("_original")).alias("_raw"))
    return _Projections(base, typed, checked, rows, out)


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


def _first_error(spec: PipelineSpec) -> SparkColumn:
    """The first rule a record breaks, in the order a reader checks: the value as a whole, then each column in
    the entry's order (required, type, storable, min, max, in, pattern, max_length)."""
    value = F.col("_value")
    checks: list[tuple[SparkColumn, SparkColumn]] = [(value.isNull(), F.lit("empty value"))]
    if spec.format == "avro":
        checks.append((F.col("_avro_error").isNotNull(), F.col("_avro_error")))
    checks.append((~F.is_valid_utf8(value.cast("string")) | _invalid_utf8(value), F.lit("value is not valid UTF-8")))
    checks.append((F.col(JSON_TEXT).isNull() | F.col(f"{JSON_TEXT}.{CORRUPT}").isNotNull(), F.lit("invalid JSON")))
    for name, c in spec.columns.items():
        raw, v = F.col(f"_c_{name}.raw"), F.col(f"_c_{name}.v")
        checks += _column_checks(name, c, spec.rules(name), raw, v)
    return _first_of(checks)


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


def _shown(raw: SparkColumn) -> SparkColumn:
    """The value as a reason shows it: at most 200 characters, a NUL as U+FFFD (a reason must be storable text)."""
    return F.coalesce(F.substring(F.translate(raw, NUL, "\ufffd"), 1, 200), F.lit("null"))


def _invalid_utf8(value: SparkColumn) -> SparkColumn:
    """Spark's binary-to-string cast replaces invalid bytes; a round trip that changes the bytes shows them."""
    return F.encode(F.decode(value, "UTF-8"), "UTF-8") != value


def _column_checks(name: str, c: Column, rules: tuple[Rule, ...], raw: SparkColumn,
                   v: SparkColumn) -> list[tuple[SparkColumn, SparkColumn]]:
    """The column's checks in order: required, its type, what PostgreSQL can store, then its other rules."""
    t = c.column_type
    shown = _shown(raw)
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
        reason = F.concat(reason, F.lit(": "), _shown(raw))
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
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    # a new schema: StructType.add would change the input DataFrame's own
    out_schema = StructType([*kafka.schema.fields, StructField("_avro_error", StringType()),
                             StructField("_original", BinaryType())])

    def decode(batches: Iterator) -> Iterator:
        from streamfill.spark_jobs.pipelines.avro import to_json_batches

        yield from to_json_batches(batches, schema, wire, registry)

    return kafka.mapInArrow(decode, out_schema)

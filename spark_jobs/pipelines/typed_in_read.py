"""Which of an entry's JSON values the `streamfill_kafka` read types itself (connectors.kafka.json_values): the
read's options for an entry, with each rule's bound as Spark casts it, so the read and the parse agree."""

from __future__ import annotations

from collections.abc import Hashable

from pyspark.sql import functions as F

from streamfill.bounded_cache import BoundedCache
from streamfill.connectors.kafka.json_values import OPTION, JsonColumns
from streamfill.connectors.kafka.value_columns import CHECKED, ValueColumn, can_check
from streamfill.rules import BOUNDS, Rule
from streamfill.spark_jobs.pipelines.envelope import CORRUPT
from streamfill.spark_jobs.pipelines.rule_checks import spark_bound
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

# (JVM's gateway, the entry's typed fields) -> its columns for the read, so a bound is cast once per entry
_typed_columns: BoundedCache[Hashable, JsonColumns] = BoundedCache(32)


def reader_options(spec: PipelineSpec) -> dict[str, str]:
    """The `streamfill_kafka` options that have the read type the entry's JSON values itself where the result is
    certain to be Spark's (connectors.kafka.json_values, less CPU than from_json and the casts);
    none for an entry it cannot type (Avro, raw or Debezium values, a routed entry, nested types, paths into the
    value, a json column, an `in` list of numbers other than whole ones: value_columns.can_check). `parse` gives
    the same rows and dead letters either way."""
    columns = _json_columns(spec)
    return {} if columns is None else {OPTION: columns.to_option()}


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
    return _typed_columns.get(key, lambda: _with_bounds(spec))


def _with_bounds(spec: PipelineSpec) -> JsonColumns:
    """The entry's columns for the reader with the rules it checks, each min and max as Spark casts it (the same
    `spark_bound` the checks compare with), computed once on the driver from a one-row local relation. A bound
    Spark cannot cast never fires, so the reader does not get it."""
    from pyspark.sql import SparkSession

    bounds = []
    for name, c in spec.columns.items():
        kind = c.column_type.name
        for rule in spec.rules(name):
            if rule.broken_when in BOUNDS:
                bound = spark_bound(rule.operand, c)
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

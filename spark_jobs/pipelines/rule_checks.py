"""A pipeline entry's rules (streamfill.rules) as Spark conditions, each with the reason a record that breaks it
becomes a dead letter: `_error` is the first rule a record breaks."""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN
from streamfill.connectors.kafka.value_columns import CHECKED
from streamfill.rules import BrokenWhen, Rule, Shown
from streamfill.spark_jobs.pipelines import envelope, reasons
from streamfill.spark_jobs.pipelines.columns import ColumnSpec
from streamfill.spark_jobs.pipelines.envelope import CORRUPT
from streamfill.spark_jobs.pipelines.readings import JSON_TEXT, ROUTE_VALUE, Reading
from streamfill.spark_jobs.pipelines.reasons import NUL
from streamfill.spark_jobs.pipelines.routes import RouteTable
from streamfill.spark_jobs.pipelines.spec import PipelineSpec
from streamfill.spark_jobs.pipelines.types import NUMERIC

Check = tuple[SparkColumn, SparkColumn]
"""The condition that breaks a rule, and the dead letter's reason."""


def first_error(spec: PipelineSpec, tables: list[RouteTable],
                reading_of: dict[tuple[str, str], Reading]) -> SparkColumn:
    """The first rule a record breaks, in the order a reader checks: the value as a whole (its change, its
    route), then each column of its table in the table's order (required, type, storable, min, max, in,
    pattern, max_length); a delete checks only its key. An ignored record breaks nothing."""
    value = F.col("_value")
    checks: list[Check] = []
    if not spec.can_delete:  # a null value of an entry that can delete is a tombstone
        checks.append((value.isNull(), F.lit("empty value")))
    if spec.avro_values:
        checks.append((F.col("_avro_error").isNotNull(), F.col("_avro_error")))
    checks.append((~F.is_valid_utf8(value.cast("string")) | _invalid_utf8(value), F.lit("value is not valid UTF-8")))
    if spec.can_delete:
        checks.append((F.col(envelope.CHANGE_ERROR).isNotNull(), F.col(envelope.CHANGE_ERROR)))
    checks.append((F.col(JSON_TEXT).isNull() | F.col(f"{JSON_TEXT}.{CORRUPT}").isNotNull(), F.lit("invalid JSON")))

    def table_checks(t: RouteTable) -> list[Check]:
        out = []
        for name, c in t.columns.items():
            r = reading_of[(t.table, name)]
            out += _column_checks(name, c, t.rules(name), r.raw, r.v)
        return out

    if spec.route is None:
        upsert = first_of(checks + table_checks(tables[0]))
    else:
        by_table = F.lit(None).cast("string")
        for t in reversed(tables):
            by_table = F.when(F.col(ROUTE_COLUMN) == t.table, first_of(table_checks(t))).otherwise(by_table)
        unrouted = F.concat(F.lit(f"no route for {spec.route.field}: "), reasons.shown(F.col(ROUTE_VALUE)))
        upsert = first_of([*checks, (F.col(ROUTE_COLUMN).isNull(), unrouted), (F.lit(True), by_table)])
    if not spec.can_delete:
        return upsert
    delete = first_of(checks + _key_checks(spec, reading_of))
    return F.when(F.col(envelope.IGNORED), F.lit(None).cast("string")).when(F.col(DELETE_COLUMN), delete) \
        .otherwise(upsert)


def _key_checks(spec: PipelineSpec, reading_of: dict[tuple[str, str], Reading]) -> list[Check]:
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


def first_of(checks: list[Check]) -> SparkColumn:
    """The reason of the first check whose condition holds; null when none does."""
    out = F.lit(None).cast("string")
    for cond, reason in reversed(checks):  # the first rule broken wins
        out = F.when(cond, reason).otherwise(out)
    return out


def checks_left_by_the_read(spec: PipelineSpec) -> list[Check]:
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


def _column_checks(name: str, c: ColumnSpec, rules: tuple[Rule, ...], raw: SparkColumn,
                   v: SparkColumn) -> list[Check]:
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
    BrokenWhen.BELOW: lambda raw, v, c, bound: v < spark_bound(bound, c),
    BrokenWhen.ABOVE: lambda raw, v, c, bound: v > spark_bound(bound, c),
    BrokenWhen.NOT_IN: lambda raw, v, c, values: ~v.isin(*values),
    BrokenWhen.NO_MATCH: lambda raw, v, c, pattern: ~v.rlike(pattern),
    BrokenWhen.LONGER: lambda raw, v, c, length: F.length(v) > length,
}


def _check(name: str, c: ColumnSpec, rule: Rule, raw: SparkColumn, v: SparkColumn) -> Check:
    """The condition that breaks the rule, and the dead letter's reason."""
    reason = F.lit(rule.reason(name))
    if rule.shown is Shown.VALUE:
        reason = F.concat(reason, F.lit(": "), reasons.shown(raw))
    elif rule.shown is Shown.LENGTH:
        reason = F.concat(reason, F.lit(": "), F.length(v).cast("string"), F.lit(" characters"))
    return _BROKEN[rule.broken_when](raw, v, c, rule.operand), reason


def spark_bound(value, c: ColumnSpec) -> SparkColumn:
    """min or max as the column's type. Numbers are written out in full: Spark's cast of "1E+2" or "100.0" to
    an int column is null, and a null bound would never fire."""
    if isinstance(value, Decimal):
        value = int(value) if c.column_type.name in ("int", "bigint") else format(value, "f")
    return F.lit(str(value)).try_cast(c.column_type.spark)

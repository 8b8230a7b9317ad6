"""How the parse reads a column from a record's document: the field's JSON text, and its value typed once per
column and field however many route tables read it."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from streamfill.spark_jobs.pipelines.columns import ColumnSpec
from streamfill.spark_jobs.pipelines.routes import RouteTable

STRUCT_CORRUPT = "_streamfill_corrupt"  # a struct column's own corrupt-record field, dropped once checked
JSON_TEXT = "_json"  # the value's top-level fields as text (from_json), CORRUPT set when it is not JSON
JSON_EXACT = "_json_exact"  # the top-level fields json columns read, as variants: their exact JSON
ROUTE_VALUE = "_route_value"  # the text of a routed entry's route field


@dataclass(frozen=True)
class Reading:
    """One typed value: column `name` read from the document's field `path`, typed once however many route
    tables have that column from that field."""

    alias: str  # the typed projection's struct(raw, v) of it
    name: str
    column: ColumnSpec

    @property
    def path(self) -> str:
        return self.column.field or self.name

    @property
    def raw(self) -> SparkColumn:
        return F.col(f"{self.alias}.raw")

    @property
    def v(self) -> SparkColumn:
        return F.col(f"{self.alias}.v")


def readings_by_column(tables: list[RouteTable]) -> dict[tuple[str, str], Reading]:
    """(table, column) -> the reading the column takes its value from. A column name several tables read from
    one field is typed once; from another field it is a reading of its own (_c1_NAME, ...)."""
    by_field: dict[tuple[str, str], Reading] = {}
    out = {}
    for t in tables:
        for name, c in t.columns.items():
            path = c.field or name
            if (name, path) not in by_field:
                k = sum(1 for n, _ in by_field if n == name)
                by_field[(name, path)] = Reading(f"_c_{name}" if k == 0 else f"_c{k}_{name}", name, c)
            out[(t.table, name)] = by_field[(name, path)]
    return out


def raw_field(path: str) -> SparkColumn:
    """The field's JSON text: top-level fields come from from_json as text (objects and arrays as their JSON);
    a path such as customer.id goes into that text."""
    first, _, rest = path.partition(".")
    top = F.col(JSON_TEXT).getField(first)
    return F.get_json_object(top, f"$.{rest}") if rest else top


def typed_value(raw: SparkColumn, c: ColumnSpec, path: str) -> SparkColumn:
    """The field's text `raw` as the column's type; null when it is not of that type."""
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

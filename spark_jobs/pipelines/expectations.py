"""Great Expectations from a pipeline entry: every column rule (streamfill.rules) is also an expectation on the
table, so what the stream rejects and what quality checks can never drift apart; plus the entry's extra
expectations (`quality:`, GX names with keyword arguments) and, for a business key, its uniqueness. A routed
entry's tables each get their own: the table's columns, rules and key, and the `quality:` expectations whose
columns it has.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from typing import Any

from streamfill.errors import OptionError
from streamfill.rules import BOUNDS, BrokenWhen, Rule
from streamfill.spark_jobs.pipelines.columns import COORDINATES, ColumnSpec
from streamfill.spark_jobs.pipelines.routes import RouteTable
from streamfill.spark_jobs.pipelines.spec import PipelineSpec


def class_name(snake: str) -> str:
    """`expect_column_values_to_be_unique` -> `ExpectColumnValuesToBeUnique`."""
    return "".join(part.capitalize() for part in snake.split("_"))


def extra(spec: PipelineSpec, routed: RouteTable | None = None) -> list:
    """The entry's `quality:` expectations, built (and so validated) by GX; on `routed`, one table of a routed
    entry, those naming only columns it has (one naming no column: each table's). An expectation naming a column
    no table of the entry has is refused, so a typo never checks nothing."""
    built = _built(spec)
    if not spec.route_tables():
        return built
    tables = {t.table: set(t.table_columns()) for t in spec.route_tables()}
    for given, expectation in zip(spec.quality, built, strict=True):
        named = _columns_of(expectation)
        if not any(named <= columns for columns in tables.values()):
            raise OptionError("quality", given, f"names {', '.join(sorted(named))}, which no table of the routed job "
                              f"{spec.name!r} has together",
                              "name the columns of one of its tables (" + "; ".join(
                                  f"{t}: {', '.join(sorted(c))}" for t, c in tables.items()) + ")")
    if routed is None:
        return built
    return [e for e in built if _columns_of(e) <= set(routed.table_columns())]


def _columns_of(expectation: Any) -> set[str]:
    """The columns an expectation names (GX's keyword arguments column, column_A, column_B, column_list)."""
    named = [getattr(expectation, k, None) for k in ("column", "column_A", "column_B")]
    return {c for c in named if isinstance(c, str)} | set(getattr(expectation, "column_list", None) or ())


def _built(spec: PipelineSpec) -> list:
    import great_expectations.expectations as gxe

    out = []
    for entry in spec.quality:
        (name, kwargs), = entry.items()
        cls = getattr(gxe, class_name(name), None) if re.fullmatch(r"expect_[a-z0-9_]+", name) else None
        if cls is None:
            raise OptionError("quality", name, f"is not a Great Expectations expectation (job {spec.name!r})",
                              "use a GX name such as expect_column_values_to_be_unique or "
                              "expect_column_values_to_be_between")
        try:
            out.append(cls(**(kwargs or {})))
        except Exception as exc:  # GX validates keyword arguments with pydantic
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OptionError("quality", {name: kwargs}, f"does not fit {name} (job {spec.name!r}): {first}",
                              f"give the keyword arguments {name} takes, e.g. column: ...") from None
    return out


def from_rules(spec: PipelineSpec, routed: RouteTable | None = None) -> list:
    """One expectation per column rule, in the entry's order; a business key is unique. For a routed entry, those
    of `routed`, one of its tables (default: its first, spec.table): that table's columns, rules and key."""
    import great_expectations.expectations as gxe

    routed = routed or next(iter(spec.route_tables()), None)
    columns, rules_of, key = (routed.columns, routed.rules, routed.key) if routed else (spec.columns, spec.rules,
                                                                                          spec.key)
    out: list = []
    for name, c in columns.items():
        rules = rules_of(name)
        bounds = {r.broken_when: _bound(c, r.operand) for r in rules if r.broken_when in BOUNDS}
        for rule in rules:
            if rule.broken_when is BrokenWhen.ABOVE and BrokenWhen.BELOW in bounds:
                continue  # one expectation between min and max
            out.append(_expectation(gxe, name, rule, bounds))
    business = [k for k in key if k not in COORDINATES]
    if business:
        listed = ", ".join(f'"{k}"' for k in key)
        out.append(gxe.UnexpectedRowsExpectation(
            description=f"key ({', '.join(key)}) is unique",
            unexpected_rows_query=f"SELECT {listed}, count(*) AS copies FROM {{batch}} GROUP BY {listed} "
                                  "HAVING count(*) > 1"))
    return out


def _expectation(gxe: Any, column: str, rule: Rule, bounds: dict[BrokenWhen, Any]) -> Any:
    """The expectation that fails on the rows that break the rule (GX's bounds are inclusive, as the rules')."""
    broken_when = rule.broken_when
    if broken_when is BrokenWhen.MISSING:
        return gxe.ExpectColumnValuesToNotBeNull(column=column)
    if broken_when in BOUNDS:
        return gxe.ExpectColumnValuesToBeBetween(column=column, min_value=bounds.get(BrokenWhen.BELOW),
                                                 max_value=bounds.get(BrokenWhen.ABOVE))
    if broken_when is BrokenWhen.NOT_IN:
        return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=list(rule.operand))
    if broken_when is BrokenWhen.NO_MATCH:
        return gxe.ExpectColumnValuesToMatchRegex(column=column, regex=rule.operand)
    return gxe.ExpectColumnValueLengthsToBeBetween(column=column, max_value=rule.operand)


def for_entry(spec: PipelineSpec, routed: RouteTable | None = None) -> list:
    """The expectations of the entry's table, or of `routed`, one table of a routed entry."""
    return [*from_rules(spec, routed), *extra(spec, routed)]


def _bound(c: ColumnSpec, value: Any) -> Any:
    """Numbers as numbers; dates as dates and times as aware datetimes (the columns are date and timestamptz)."""
    if c.column_type.name == "date":
        return date.fromisoformat(str(value)[:10])
    if c.column_type.name == "timestamp":
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    number = float(value)
    return int(number) if number.is_integer() else number

"""Great Expectations from a pipeline entry: every column rule is also an expectation on the table, so what the
stream rejects and what quality checks can never drift apart; plus the entry's extra expectations (`quality:`,
GX names with keyword arguments) and, for a business key, its uniqueness.

  required -> not null, min/max -> between, in -> in set, pattern -> regex, max_length -> length at most
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from typing import Any

from spark_jobs.pipelines.spec import COORDINATES, Column, PipelineSpec
from streamfill.errors import OptionError


def class_name(snake: str) -> str:
    """`expect_column_values_to_be_unique` -> `ExpectColumnValuesToBeUnique`."""
    return "".join(part.capitalize() for part in snake.split("_"))


def extra(spec: PipelineSpec) -> list:
    """The entry's `quality:` expectations, built (and so validated) by GX."""
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
        except Exception as exc:  # noqa: BLE001 - GX validates keyword arguments with pydantic
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OptionError("quality", {name: kwargs}, f"does not fit {name} (job {spec.name!r}): {first}",
                              f"give the keyword arguments {name} takes, e.g. column: ...") from None
    return out


def from_rules(spec: PipelineSpec) -> list:
    """One expectation per column rule, in the entry's order; a business key is unique."""
    import great_expectations.expectations as gxe

    out: list = []
    keys = set(spec.key)
    for name, c in spec.columns.items():
        if c.required or name in keys:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=name))
        if c.min is not None or c.max is not None:
            out.append(gxe.ExpectColumnValuesToBeBetween(column=name, min_value=_bound(c, c.min),
                                                         max_value=_bound(c, c.max)))
        if c.in_ is not None:
            out.append(gxe.ExpectColumnValuesToBeInSet(column=name, value_set=list(c.in_)))
        if c.pattern is not None:
            out.append(gxe.ExpectColumnValuesToMatchRegex(column=name, regex=c.pattern))
        if c.max_length is not None:
            out.append(gxe.ExpectColumnValueLengthsToBeBetween(column=name, max_value=c.max_length))
    business = [k for k in spec.key if k not in COORDINATES]
    if business:
        columns = ", ".join(f'"{k}"' for k in spec.key)
        out.append(gxe.UnexpectedRowsExpectation(
            description=f"key ({', '.join(spec.key)}) is unique",
            unexpected_rows_query=f"SELECT {columns}, count(*) AS copies FROM {{batch}} GROUP BY {columns} "
                                  "HAVING count(*) > 1"))
    return out


def for_entry(spec: PipelineSpec) -> list:
    return [*from_rules(spec), *extra(spec)]


def _bound(c: Column, value: Any) -> Any:
    """Numbers as numbers; dates as dates and times as aware datetimes (the columns are date and timestamptz)."""
    if value is None:
        return None
    if c.column_type.name == "date":
        return date.fromisoformat(str(value)[:10])
    if c.column_type.name == "timestamp":
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    number = float(value)
    return int(number) if number.is_integer() else number

"""The docs' tables of options and settings, made from their declarations: each sits in its page between
`<!-- options: NAME -->` and `<!-- end options -->` and is written from the declarations, never by hand."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel

from streamfill.declarations import Option

END = "<!-- end options -->"
OPTIONS_HEADER = "| option | meaning |"
Row = TypeVar("Row")


def start(name: str) -> str:
    return f"<!-- options: {name} -->"


def docs_row(table: str, *, shown_default: str | None = None, group: str | None = None) -> dict[str, str]:
    """A setting's row in the docs table `table` (a pydantic field's json_schema_extra; its description is the
    row's meaning): `shown_default` where the value alone would not say what the default is (a path, a URL made
    of other settings); settings of one `group` share the row of the first."""
    return {"docs_table": table, **({"shown_default": shown_default} if shown_default else {}),
            **({"group": group} if group else {})}


def option_table(options: Sequence[Option]) -> str:
    """The markdown table of a data source's options, one row per option or per group, in declaration order."""
    lines = [OPTIONS_HEADER, "|---|---|"]
    for row in _rows(options, lambda option: option.group):
        keys = row[0].label or ", ".join(f"`{o.key}`" + (" (required)" if o.required else "") for o in row)
        lines.append(f"| {keys} | {row[0].meaning} |")
    return "\n".join(lines)


def setting_table(settings: type[BaseModel], table: str, header: str) -> str:
    """The markdown table of the `settings` fields marked for `table` (docs_row), under `header`'s three columns:
    the environment variables, their defaults, their meaning."""
    prefix = settings.model_config.get("env_prefix", "")
    fields = [(name, field) for name, field in settings.model_fields.items()
              if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("docs_table") == table]
    lines = [header, "|---|---|---|"]
    for row in _rows(fields, lambda named: named[1].json_schema_extra.get("group")):
        names = ", ".join(f"`{prefix.upper()}{name.upper()}`" for name, _ in row)
        defaults = ", ".join(field.json_schema_extra.get("shown_default") or f"`{_written(field.default)}`"
                             for _, field in row)
        lines.append(f"| {names} | {defaults} | {row[0][1].description} |")
    return "\n".join(lines)


def table_in(page: str, name: str) -> str:
    """The table between `name`'s markers in `page`; ValueError when the page has no such markers."""
    found = _between(name).search(page)
    if found is None:
        raise ValueError(f"the page has no `{start(name)}` ... `{END}`")
    return found.group("table").strip()


def with_table(page: str, name: str, table: str) -> str:
    """`page` with the table between `name`'s markers replaced by `table`."""
    table_in(page, name)
    return _between(name).sub(lambda _: f"{start(name)}\n\n{table}\n\n{END}", page, count=1)


def _between(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(start(name)) + r"(?P<table>.*?)" + re.escape(END), re.DOTALL)


def _rows(items: Sequence[Row], group_of: Callable[[Row], str | None]) -> list[list[Row]]:
    """`items` as table rows: neighbours of one group share a row."""
    rows: list[list[Row]] = []
    for item in items:
        if rows and group_of(item) is not None and group_of(item) == group_of(rows[-1][0]):
            rows[-1].append(item)
        else:
            rows.append([item])
    return rows


def _written(default: object) -> str:
    """A default as a user would set it: 240.0 seconds is written 240."""
    return f"{default:g}" if isinstance(default, float) else str(default)

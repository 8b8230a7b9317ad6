"""The docs' tables of options and settings are their declarations' own: each reads exactly as the declarations
render it, every declared option or setting has a row, and every key a row names is declared."""

from __future__ import annotations

import re

import pytest

from streamfill.cli.option_docs import TABLES
from streamfill.connectors.kafka import kafka_sink_declarations as kafka_sink
from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.connectors.postgres import postgres_sink_declarations as postgres_sink
from streamfill.declarations import Option
from streamfill.option_tables import table_in
from streamfill.settings import Settings

pytestmark = pytest.mark.unit

# each options table's declarations module and the tuple that orders its rows
OPTION_TABLES = {"streamfill_kafka": (kafka_source, kafka_source.SOURCE_OPTIONS),
                 "streamfill_postgres": (postgres_sink, postgres_sink.SINK_OPTIONS),
                 "streamfill_kafka sink": (kafka_sink, kafka_sink.SINK_OPTIONS)}
SETTING_TABLES = ("settings", "retention")


def documented_keys(name: str) -> set[str]:
    """Every backquoted key in the first cell of the table's rows."""
    page, _ = TABLES[name]
    rows = table_in(page.read_text(), name).splitlines()[2:]
    return {key for row in rows for key in re.findall(r"`([^`]+)`", row.split(" | ")[0])}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_docs_table_reads_as_its_declarations_render_it(name):
    page, render = TABLES[name]
    assert table_in(page.read_text(), name) == render(), \
        f"the {name!r} table in docs/{page.name} differs from its declarations: run `make docs-options`"


@pytest.mark.parametrize("name", sorted(OPTION_TABLES))
def test_every_declared_option_has_a_row_and_every_key_in_a_row_is_declared(name):
    module, ordered = OPTION_TABLES[name]
    declared = [value for value in vars(module).values() if isinstance(value, Option)]
    assert set(declared) == set(ordered), "an option declared but left out of the table's order"
    assert documented_keys(name) == {option.key for option in declared}


@pytest.mark.parametrize("name", SETTING_TABLES)
def test_every_documented_setting_has_a_row_and_every_row_names_a_setting(name):
    marked = {f"STREAMFILL_{field.upper()}" for field, about in Settings.model_fields.items()
              if isinstance(about.json_schema_extra, dict) and about.json_schema_extra.get("docs_table") == name}
    assert marked and documented_keys(name) == marked

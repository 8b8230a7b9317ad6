"""Writes the docs' option and setting tables from the declarations (`make docs-options`); without `--write`
it names the tables that differ and exits 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from streamfill import REPO_ROOT
from streamfill.connectors.kafka import kafka_sink_declarations as kafka_sink
from streamfill.connectors.kafka import source_declarations as kafka_source
from streamfill.connectors.postgres import postgres_sink_declarations as postgres_sink
from streamfill.option_tables import option_table, setting_table, table_in, with_table
from streamfill.settings import Settings

DOCS = REPO_ROOT / "docs"
# each table's marker name -> its page and how the declarations render it
TABLES: dict[str, tuple[Path, Callable[[], str]]] = {
    "streamfill_kafka": (DOCS / "connectors.md", lambda: option_table(kafka_source.SOURCE_OPTIONS)),
    "streamfill_postgres": (DOCS / "connectors.md", lambda: option_table(postgres_sink.SINK_OPTIONS)),
    "streamfill_kafka sink": (DOCS / "connectors.md", lambda: option_table(kafka_sink.SINK_OPTIONS)),
    "settings": (DOCS / "operations.md",
                 lambda: setting_table(Settings, "settings", "| variable | default | meaning |")),
    "retention": (DOCS / "operations.md",
                  lambda: setting_table(Settings, "retention", "| Setting | Default | What goes once older |")),
}


def stale() -> list[str]:
    """The tables whose page differs from what their declarations render."""
    return [name for name, (page, render) in TABLES.items() if table_in(page.read_text(), name) != render()]


def write() -> list[str]:
    """Every table written from its declarations; the names of those that changed."""
    changed = stale()
    for name, (page, render) in TABLES.items():
        page.write_text(with_table(page.read_text(), name, render()))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the tables into their pages")
    args = parser.parse_args(argv)
    if args.write:
        print("written: " + (", ".join(write()) or "nothing changed"))
        return 0
    differing = stale()
    for name in differing:
        print(f"{name}: the table in {TABLES[name][0].relative_to(REPO_ROOT)} differs from its declarations")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

"""Where offsets_db lives: a schema of its own (STREAMFILL_DB_SCHEMA, default `streamfill`), so its generic names
(jobs, runs, batches) never meet a team's own tables. The models name a placeholder schema that every engine of
`offsets_db.engine` translates to the setting (SQLAlchemy's schema_translate_map: a user's table, which has no
schema or a real one, is never translated); hand-written SQL names the tables through `qualified` and `sql`."""

from __future__ import annotations

import os
from functools import lru_cache

from sqlalchemy import TextClause, text

from streamfill.offsets_db.models import PLACEHOLDER, Base
from streamfill.offsets_db.views import ALL as VIEW_SQL
from streamfill.settings import Settings, get_settings

VIEWS = tuple(VIEW_SQL)
VERSION_TABLE = "alembic_version"


def tables() -> tuple[str, ...]:
    """offsets_db's tables, each after the tables it references."""
    return tuple(t.name for t in Base.metadata.sorted_tables)


def name() -> str:
    return _checked(os.environ.get(_SETTING))


_SETTING = f"{Settings.model_config['env_prefix']}DB_SCHEMA"


@lru_cache(maxsize=8)
def _checked(_raw: str | None) -> str:
    """The setting read and validated once per value: every statement of a commit and the page names it."""
    return get_settings().db_schema


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def qualified(relation: str, schema: str | None = None) -> str:
    """`"streamfill"."jobs"` for offsets_db's table or view `relation`."""
    return f"{quote(schema or name())}.{quote(relation)}"


def translate_map() -> dict[str, str]:
    return {PLACEHOLDER: name()}


def sql(template: str) -> str:
    """`template` with each `{jobs}`, `{batches}`, ... `{offset_history}` replaced by its qualified name."""
    return _filled(template, name())


class _Names(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"  # another placeholder of the template's own (str.format's), kept for later


@lru_cache(maxsize=256)
def _filled(template: str, schema: str) -> str:
    return template.format_map(_Names({r: qualified(r, schema) for r in (*tables(), *VIEWS)}))


def statement(template: str) -> TextClause:
    """sqlalchemy.text of `template` with offsets_db's relations named in their schema (`sql`)."""
    return text(sql(template))

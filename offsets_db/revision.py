"""That offsets_db stands at the migration revision this code's migrations end at (docs/upgrading.md): every
launch, task and page request checks it before it reads or records anything, so an upgrade cannot half-happen
(new code against an old schema failing mid-batch, old code writing a schema it does not know)."""

from __future__ import annotations

from functools import lru_cache

from streamfill import requirements
from streamfill.errors import RevisionMismatch
from streamfill.offsets_db import schema

UPGRADE = "stop the streams, then run `streamfill db upgrade` (docs/upgrading.md)"


@lru_cache(maxsize=1)
def revisions() -> tuple[str, ...]:
    """The revisions the migrations bring, oldest first; the last is the one this code needs."""
    from streamfill.offsets_db.migrate import scripts

    return tuple(reversed([r.revision for r in scripts().walk_revisions()]))


def stored(cur, schema_name: str | None = None) -> str | None:
    """The revision offsets_db records (alembic's version table in its schema); None when it has none."""
    schema_name = schema_name or schema.name()
    table = schema.qualified(schema.VERSION_TABLE, schema_name)
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
    if not cur.fetchone()[0]:
        return None
    cur.execute(f"SELECT version_num FROM {table}")
    found = cur.fetchone()
    return found[0] if found else None


def problem(found: str | None, known: tuple[str, ...], schema_name: str) -> str | None:
    """Why offsets_db at `found` cannot be used by code whose migrations are `known`, or None when it can."""
    needed = known[-1]
    if found == needed:
        return None
    if found is None:
        return (f"offsets_db has no migration revision in schema {schema_name} (this streamfill needs revision "
                f"{needed}): run `streamfill db upgrade` with STREAMFILL_DB_URL pointing at this database")
    if found in known:
        return (f"offsets_db is at migration revision {found} and this streamfill needs revision {needed}: "
                f"{UPGRADE}")
    return (f"offsets_db is at migration revision {found}, which this streamfill (its newest revision is "
            f"{needed}) does not know: a newer streamfill migrated it. Install that version here; offsets_db "
            "is never migrated down")


def check(cur, schema_name: str | None = None) -> None:
    """RevisionMismatch, naming both revisions and what to run, unless offsets_db is at this code's revision;
    UnsupportedVersion on a PostgreSQL older than streamfill needs."""
    cur.execute("SHOW server_version_num")
    info = cur.connection.info
    requirements.postgres(int(cur.fetchone()[0]), f"{info.host}:{info.port}/{info.dbname}")
    schema_name = schema_name or schema.name()
    why = problem(stored(cur, schema_name), revisions(), schema_name)
    if why:
        raise RevisionMismatch(why)


def require(engine) -> None:
    """check() on a connection of a SQLAlchemy engine (the tasks' and the page's)."""
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:
            check(cur)
    finally:
        raw.close()

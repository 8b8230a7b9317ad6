"""Alembic environment: online migrations against the URL set by offsets_db.migrate, into offsets_db's own schema
(STREAMFILL_DB_SCHEMA), its version table there too. An install from before that schema (its tables and version
table in the database's default schema) is found here and moved by migration 0006."""

from alembic import context
from sqlalchemy import create_engine, pool, text

from streamfill.offsets_db import schema
from streamfill.offsets_db.models import Base
from streamfill.pg import connect_args

OURS = {"0001", "0002", "0003", "0004", "0005"}  # the revisions an install before its own schema can be at


def _exists(connection, relation: str) -> bool:
    return connection.scalar(text("SELECT to_regclass(:r) IS NOT NULL"), {"r": relation})


def _earlier_install(connection, target: str) -> str | None:
    """The schema holding an install made before offsets_db had a schema of its own (public, or another of the
    search path), None if there is none or the schema has offsets_db already."""
    if _exists(connection, schema.qualified(schema.VERSION_TABLE, target)):
        return None
    searched = connection.scalars(text("SELECT unnest(current_schemas(false))")).all()
    for candidate in dict.fromkeys([*searched, "public"]):
        if candidate == target:
            continue
        version_table = schema.qualified(schema.VERSION_TABLE, candidate)
        if not (_exists(connection, version_table) and _exists(connection, schema.qualified("batch_offsets",
                                                                                           candidate))):
            continue
        versions = set(connection.scalars(text(f"SELECT version_num FROM {version_table}")))
        if versions and versions <= OURS:  # another application's alembic_version is left alone
            return candidate
    return None


url = context.config.get_main_option("sqlalchemy.url")
target = schema.name()
engine = create_engine(url, poolclass=pool.NullPool, connect_args=connect_args())
with engine.connect() as connection:
    earlier = _earlier_install(connection, target)
    context.config.attributes["earlier_schema"] = earlier
    if not connection.scalar(text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"), {"s": target}):
        # a DBA may have created it for the migration owner; creating it needs CREATE on the database
        connection.execute(text(f"CREATE SCHEMA {schema.quote(target)}"))
    if earlier:
        connection.execute(text(f"ALTER TABLE {schema.qualified(schema.VERSION_TABLE, earlier)} "
                                f"SET SCHEMA {schema.quote(target)}"))
    # revisions 0001-0005 name their tables bare: an earlier install's are where it has them until 0006 moves
    # them (and sets the schema's path for what follows), a fresh install's land in the schema
    connection.execute(text(f"SET search_path TO {schema.quote(earlier or target)}"))
    context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True,
                      version_table_schema=target)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
engine.dispose()

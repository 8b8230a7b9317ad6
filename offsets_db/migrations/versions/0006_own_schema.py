"""offsets_db's tables and views in a schema of their own (STREAMFILL_DB_SCHEMA)

An install made before this revision has them in the database's default schema (`public`, usually), where their
generic names meet a team's own tables. They move with their data, indexes, constraints and sequences; the views
follow their tables. A fresh install made them in the schema already (env.py's search_path), so nothing moves.

Revision ID: 0006
Revises: 0005
"""

from alembic import context, op

from offsets_db import schema

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    earlier = context.config.attributes.get("earlier_schema")
    if not earlier:
        return
    into = schema.quote(schema.name())
    for table in schema.tables():
        op.execute(f"ALTER TABLE {schema.qualified(table, earlier)} SET SCHEMA {into}")
    for view in schema.VIEWS:
        op.execute(f"ALTER VIEW {schema.qualified(view, earlier)} SET SCHEMA {into}")


def downgrade() -> None:
    """The tables stay in the schema: revision 0005's layout differs only in where they are."""

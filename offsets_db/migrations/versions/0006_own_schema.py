"""offsets_db's tables and views in a schema of their own (STREAMFILL_DB_SCHEMA)

An install made before this revision has them in the database's default schema (`public`, usually), where their
generic names meet a team's own tables. They move with their data, indexes, constraints and sequences; the views
follow their tables. A fresh install made them in the schema already (env.py's search_path), so nothing moves.

Revision ID: 0006
Revises: 0005
"""

from alembic import context, op

from streamfill.offsets_db import schema

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


# what revisions 0001-0005 made, named here: a later revision's tables do not exist yet when this one runs
TABLES = ("jobs", "runs", "batches", "job_leases", "quality_results", "batch_offsets", "data_loss_events",
          "dead_letters", "snapshots")
VIEWS = ("offset_history", "latest_offsets", "consumer_lag", "lag_history", "batch_throughput")


def upgrade() -> None:
    earlier = context.config.attributes.get("earlier_schema")
    if not earlier:
        return
    into = schema.quote(schema.name())
    for table in TABLES:
        op.execute(f"ALTER TABLE {schema.qualified(table, earlier)} SET SCHEMA {into}")
    for view in VIEWS:
        op.execute(f"ALTER VIEW {schema.qualified(view, earlier)} SET SCHEMA {into}")
    op.execute(f"SET search_path TO {into}")  # later revisions name their tables bare too


def downgrade() -> None:
    """The tables stay in the schema: revision 0005's layout differs only in where they are."""

"""keys deleted by tombstones and change events, with the version that deleted them

A replay of an older range must not bring a deleted row back: `deleted_keys` keeps, per table and key, the
version of the newest delete, and an upsert lands only when it is newer (docs/pipelines.md, "Deletes").

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deleted_keys",
        sa.Column("target", sa.Text(), primary_key=True),
        sa.Column("key", JSONB(), primary_key=True),
        sa.Column("source_position", sa.Numeric(38, 0), nullable=True),
        sa.Column("kafka_timestamp", sa.DateTime(timezone=True), nullable=True),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("deleted_keys_job", "deleted_keys", ["job_id"])


def downgrade() -> None:
    op.drop_table("deleted_keys")

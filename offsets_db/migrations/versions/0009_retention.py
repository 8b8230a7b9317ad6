"""where each job's pruned history ends

`streamfill db prune` removes history older than its ages (docs/operations.md#retention). `retention_horizons`
records, per job, the commit time before which its dead letters and its batches may have been removed, so a
whole-table quality check reconciles only the batches whose dead letters are all still there.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retention_horizons",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("dead_letters_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("history_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pruned_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("retention_horizons")

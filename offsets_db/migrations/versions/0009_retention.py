"""where each job's pruned history ends; how long each commit took

`streamfill db prune` removes history older than its ages (docs/operations.md#retention). `retention_horizons`
records, per job, the commit time before which its dead letters and its batches may have been removed, so a
whole-table quality check reconciles only the batches whose dead letters are all still there. `batches.commit_ms`: the commit transaction's time up to marking
its batch committed (moving the rows and dead letters), for the jobs' metrics.

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
    op.add_column("batches", sa.Column("commit_ms", sa.Float(), nullable=True))
    op.create_table(
        "retention_horizons",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("dead_letters_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("history_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pruned_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("batches", "commit_ms")
    op.drop_table("retention_horizons")

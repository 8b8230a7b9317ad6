"""job_leases (who holds a job: generation, run, host, pid), batches.generation, runs.host and runs.pid

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_leases",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("backend_pid", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.add_column("batches", sa.Column("generation", sa.BigInteger(), nullable=True))
    op.add_column("runs", sa.Column("host", sa.String(255), nullable=True))
    op.add_column("runs", sa.Column("pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "pid")
    op.drop_column("runs", "host")
    op.drop_column("batches", "generation")
    op.drop_table("job_leases")

"""commits numbered per job, and the announcements of a stream's commits to Airflow

`jobs.commits` counts a job's commits; each commit takes the next number into `batches.commit_no` in its own
transaction, under the job row's lock, so a reader that sees commit N sees every commit before it. That number
is the outbox an announcer reads: `announcements` records which commits each asset event covered. An install
made before this revision gets its committed batches numbered in commit order.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("commits", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("batches", sa.Column("commit_no", sa.BigInteger(), nullable=True))
    op.add_column("runs", sa.Column("lineage_run_id", postgresql.UUID(as_uuid=True), nullable=True))
    op.execute("""
        UPDATE batches b SET commit_no = n.no
        FROM (SELECT id, row_number() OVER (PARTITION BY job_id ORDER BY committed_at, seq) AS no
              FROM batches WHERE committed_at IS NOT NULL) n
        WHERE b.id = n.id""")
    op.execute("""
        UPDATE jobs j SET commits = c.n
        FROM (SELECT job_id, max(commit_no) AS n FROM batches GROUP BY job_id) c
        WHERE j.id = c.job_id AND c.n IS NOT NULL""")
    op.create_unique_constraint("batches_job_commit_no", "batches", ["job_id", "commit_no"])
    op.create_table(
        "announcements",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("token", postgresql.UUID(as_uuid=True), nullable=False, unique=True),
        sa.Column("first_commit", sa.BigInteger(), nullable=False),
        sa.Column("last_commit", sa.BigInteger(), nullable=False),
        sa.Column("partition_key", sa.String(250), nullable=False),
        sa.Column("extra", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("airflow_event_id", sa.BigInteger(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("first_commit <= last_commit", name="announcements_commits_ordered"),
        sa.UniqueConstraint("job_id", "seq", name="announcements_job_seq"),
        sa.UniqueConstraint("job_id", "first_commit", name="announcements_job_first_commit"),
    )
    # at most one announcement of a job waits for delivery: the next is formed only after it went out
    op.create_index("announcements_one_pending", "announcements", ["job_id"], unique=True,
                    postgresql_where=sa.text("delivered_at IS NULL"))


def downgrade() -> None:
    op.drop_table("announcements")
    op.drop_constraint("batches_job_commit_no", "batches")
    op.drop_column("runs", "lineage_run_id")
    op.drop_column("batches", "commit_no")
    op.drop_column("jobs", "commits")

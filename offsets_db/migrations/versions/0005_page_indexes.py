"""the streamfill page: view batch_throughput; indexes for a job's dead letters and quality results by time

Revision ID: 0005
Revises: 0004
"""

from alembic import op

from streamfill.offsets_db import views

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the page reads a job's newest dead letters and verdicts; without these it scans all of the job's rows
    op.create_index("dead_letters_job_created", "dead_letters", ["job_id", "created_at"])
    op.create_index("quality_results_job_checked", "quality_results", ["job_id", "checked_at"])
    op.create_index("runs_job_newest", "runs", ["job_id", "id"])
    op.execute(views.BATCH_THROUGHPUT)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS batch_throughput")
    op.drop_index("runs_job_newest", table_name="runs")
    op.drop_index("quality_results_job_checked", table_name="quality_results")
    op.drop_index("dead_letters_job_created", table_name="dead_letters")

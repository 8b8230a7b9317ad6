"""batches.behind (lag summed over partitions at planning), an index on planning time, view lag_history

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from streamfill.offsets_db import views

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("behind", sa.BigInteger(), nullable=True))
    op.execute("UPDATE batches b SET behind = s.behind FROM (SELECT batch_id, sum(log_end - end_offset) AS behind "
               "FROM batch_offsets GROUP BY batch_id) s WHERE s.batch_id = b.id")
    op.create_index("batches_job_planned", "batches", ["job_id", "planned_at"])
    op.execute(views.LAG_HISTORY)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS lag_history")
    op.drop_index("batches_job_planned", table_name="batches")
    op.drop_column("batches", "behind")

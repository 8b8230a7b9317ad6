"""indexes on the foreign keys that had none: deleting a job deletes its batches and runs; each batch deleted
sets its dead letters', data-loss events' and snapshots' batch_id to null, and each run deleted its batches',
leases' and quality results' run_id. Without an index every one of those is a scan of the whole table. Built
inside the migrations' one transaction (an interrupted upgrade leaves nothing half done): commits that write
dead letters wait for the build.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEXES = (("dead_letters_batch", "dead_letters", "batch_id"),
           ("data_loss_events_batch", "data_loss_events", "batch_id"),
           ("snapshots_batch", "snapshots", "batch_id"),
           ("batches_run", "batches", "run_id"),
           ("job_leases_run", "job_leases", "run_id"),
           ("quality_results_run", "quality_results", "run_id"))


def upgrade() -> None:
    for name, table, column in INDEXES:
        op.create_index(name, table, [column])


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)

"""views offset_history, latest_offsets, consumer_lag

Revision ID: 0002
Revises: 0001
"""

from alembic import op

from streamfill.offsets_db import views

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


VIEWS = {"offset_history": views.OFFSET_HISTORY, "latest_offsets": views.LATEST_OFFSETS,
         "consumer_lag": views.CONSUMER_LAG}


def upgrade() -> None:
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")

"""runs: where a detached stream's driver runs (a Spark Connect server, its session and query)

A stream launched detached starts its query on a Spark Connect server and leaves; its `runs` row names the
server (without credentials), the Connect session and the query, so a later process (Airflow's supervision, a
`streamfill stream --stop`) finds the query again.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("spark_remote", sa.String(250), nullable=True))
    op.add_column("runs", sa.Column("spark_session_id", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("query_id", sa.String(64), nullable=True))


def downgrade() -> None:
    for column in ("query_id", "spark_session_id", "spark_remote"):
        op.drop_column("runs", column)

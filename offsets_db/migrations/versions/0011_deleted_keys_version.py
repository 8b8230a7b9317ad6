"""deleted_keys: the declared version of a delete as a number of any scale

A key's versions are ordered across partitions by a version the entry declares: a change event's source position,
or a column of the value (a number, or a time kept as its epoch with its microseconds), then the Kafka timestamp.
`deleted_keys.source_position` becomes `version`, a numeric of any scale.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("deleted_keys", "source_position", new_column_name="version", type_=sa.Numeric(),
                    existing_nullable=True)


def downgrade() -> None:
    op.alter_column("deleted_keys", "version", new_column_name="source_position", type_=sa.Numeric(38, 0),
                    existing_nullable=True)

"""Every foreign key of offsets_db leads an index (or the primary key): deleting a job cascades to its batches
and runs, and each deleted row sets or deletes the rows that point at it. Without such an index each of those
is a scan of the whole referring table, and forgetting one job took minutes on millions of dead letters."""

from __future__ import annotations

import pytest
from sqlalchemy import PrimaryKeyConstraint, UniqueConstraint

from streamfill.offsets_db.models import Base

pytestmark = pytest.mark.unit


def test_every_foreign_key_column_leads_an_index():
    unindexed = []
    for table in Base.metadata.tables.values():
        leading = {tuple(c.name for c in index.columns)[:1] for index in table.indexes}
        leading |= {tuple(c.name for c in constraint.columns)[:1] for constraint in table.constraints
                    if isinstance(constraint, (PrimaryKeyConstraint, UniqueConstraint))}
        for fk in table.foreign_keys:
            if (fk.parent.name,) not in leading:
                unindexed.append(f"{table.name}.{fk.parent.name}")
    assert unindexed == [], f"foreign keys without an index: {unindexed}"

"""An existing target table changed as a pipeline entry asks: its missing columns added and its safely widened
columns altered by one ALTER TABLE, waiting for readers rather than queueing them, and refused when the change
would rewrite a large table."""

from __future__ import annotations

import logging

import psycopg2
from psycopg2 import sql

from streamfill.connectors.postgres.target import Column, Target
from streamfill.connectors.postgres.widening import Widening
from streamfill.errors import SinkError
from streamfill.offsets_db.locks import SHORT_TRY, table_holders, wait_for_lock

log = logging.getLogger("streamfill.postgres_target")

# the largest table (heap, indexes and TOAST, every partition) the sink rewrites itself to widen a column: every
# reader of the table waits for the whole rewrite, so a larger one is refused, with the statement to run at a quiet
# time (docs/benchmarks.md has the rewrite's measured speed)
REWRITE_LIMIT = 32 * 2**20


def _widen_sql(cur, widen: list[tuple[Column, Widening]]) -> list[str]:
    return [f"ALTER COLUMN {sql.Identifier(c.name).as_string(cur)} TYPE {c.pg_type}" for c, _ in widen]


def check_rewrite(cur, target: Target, widen: list[tuple[Column, Widening]]) -> None:
    """A widening that rewrites the table holds every reader of it for the whole rewrite: refused above
    REWRITE_LIMIT, naming the statement to run at a quiet time."""
    rewriting = [(c, w) for c, w in widen if w.rewrite]
    if not rewriting:
        return
    # a partitioned table's size is its partitions' (pg_partition_tree lists none of a plain table)
    cur.execute("SELECT pg_total_relation_size(t) + coalesce((SELECT sum(pg_total_relation_size(p.relid)) "
                "FROM pg_partition_tree(t) p WHERE p.relid <> t), 0) FROM to_regclass(%s) t",
                (target.ident.as_string(cur),))
    size = int(cur.fetchone()[0])
    if size <= REWRITE_LIMIT:
        return
    raise SinkError(
        f"table {target.schema}.{target.table}: widening " + ", ".join(f"column {c.name} from {w.have} to {w.want}"
                                                                        for c, w in rewriting)
        + f" rewrites the whole table ({size / 2**20:,.0f} MB, more than the {REWRITE_LIMIT / 2**20:.0f} MB the sink "
        "rewrites itself), and every reader of the table would wait for the rewrite. Run it at a quiet time: "
        f"ALTER TABLE {target.ident.as_string(cur)} {', '.join(_widen_sql(cur, widen))}; then launch again")


def evolve_columns(cur, target: Target, missing: list[Column], widen: list[tuple[Column, Widening]]) -> None:
    """The columns widened and added by one ALTER TABLE (one lock, one rewrite at most), asked for in short tries:
    ACCESS EXCLUSIVE conflicts with every reader, and each one that comes while it is queued waits behind it."""
    if not missing and not widen:
        return
    name = f"{target.schema}.{target.table}"
    actions = _widen_sql(cur, widen) + [f"ADD COLUMN IF NOT EXISTS {sql.Identifier(c.name).as_string(cur)} "
                                        f"{c.pg_type}" for c in missing]
    statement = f"ALTER TABLE {target.ident.as_string(cur)} {', '.join(actions)}"
    what = ", ".join([f"widening column {c.name}" for c, _ in widen] + [f"adding column {c.name}" for c in missing])
    try:
        wait_for_lock(cur, statement, what=f"table {name}: {what}",
                      holders=table_holders(target.schema, target.table, "ACCESS EXCLUSIVE"), attempt=SHORT_TRY)
    except psycopg2.Error as exc:
        # what depends on the column (a view, a rule) refuses the change; the whole statement is undone
        cur.connection.rollback()
        reason = " ".join(str(exc).split())
        raise SinkError(f"table {name}: {statement} failed, so nothing of it was changed: {reason}. Change what "
                        "the error names, or run the statement yourself at a quiet time, then launch again") from None
    for c, w in widen:
        log.warning("table %s: column %s widened from %s to %s%s", name, c.name, w.have, c.pg_type,
                    " (the table was rewritten)" if w.rewrite else "")
    for c in missing:
        log.warning("table %s: column %s %s added (rows written before have it null)", name, c.name, c.pg_type)

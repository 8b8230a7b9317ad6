"""A write without `deletes` into a table whose deletes are recorded (offsets_db's deleted_keys) is refused: it
does not read them, so a record older than a key's delete (a second entry, a replay in `replace`, a user's
`df.write`) would bring the deleted key back. Asked at the plan (a launch's table check, before anything is
recorded) and again inside the commit, for a writer that planned before the table's first delete."""

from __future__ import annotations

from streamfill.connectors.postgres.postgres_sink_declarations import DELETES
from streamfill.errors import OptionError
from streamfill.offsets_db import deleted_keys, schema


def check_plan(cur, target: str) -> bool:
    """Refuse a write without deletes into `target` (schema.table) once a delete of it is recorded; returns whether
    this database keeps deleted keys at all (then the commit asks again)."""
    if not deleted_keys.kept(cur):
        return False
    if deleted_keys.any_recorded(cur, target):
        raise refusal(cur, target)
    return True


def check_commit(cur, target: str) -> None:
    """Inside a commit without deletes: refuse when a delete of `target` is recorded, holding the table's deletes
    lock shared so that no first delete is recorded before this commit ends."""
    if deleted_keys.beside(cur, target):
        raise refusal(cur, target)


def refusal(cur, target: str) -> OptionError:
    n = deleted_keys.recorded_count(cur, target)
    return OptionError(DELETES.key, "false", f"is off, but table {target} has deletes of {n:,} key(s) recorded in "
                       "offsets_db's deleted_keys, which a write without deletes does not read: a record older than "
                       "a key's delete would bring the deleted row back. Nothing of this write lands",
                       "Write it with deletes=true and mode=replace, as the table's deleting writer does (a pipeline "
                       "entry's `deletes: tombstone` or `format: debezium`); or, to forget the table's deletes for "
                       f"good, run DELETE FROM {schema.qualified('deleted_keys')} WHERE target = '{target}'")

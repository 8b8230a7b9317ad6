"""What a running stream makes of its entry read again (`compare`): the changes it follows between two batches, the
ones it refuses, and the ones it leaves for the next launch. Pure: two entries in, the verdict out.

- Followed, without a restart: a new column that is neither required nor part of the key (the table gets it,
  nullable), a column's type safely widened (int to bigint, decimal(p,s) to one with as many digits before and
  after the point or more: `connectors.postgres.widening`), a column's rules (min, max, in, pattern, max_length,
  field of a column outside the key, and required dropped), which decide from the next batch on which records
  become dead letters.
- Left for the next launch: how and when the stream runs and what runs beside it (`IGNORED_FIELDS`: trigger,
  start, quality, schedules, health, ...).
- Refused: whatever else changed, which changes what a committed row means or where it goes: another type, a column
  made required, a new required column, a column removed, a key column's field, and every other field of the
  entry (its key, topic(s), format, how values are decoded, derived columns, table, mode, deletes, route, dead
  letters, and any field added to entries later). The stream stops between batches and fails, naming the change
  and how to apply it; nothing of the new entry is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamfill.connectors.postgres.column_types import holds_every_value
from streamfill.connectors.postgres.widening import widening
from streamfill.errors import OptionError
from streamfill.spark_jobs.pipelines import ColumnSpec, PipelineSpec

FOLLOWED_FIELDS = ("columns",)
# how and when the stream runs and what runs beside it: the launch reads them once, and none changes a row. Every
# other field says what a record is read as, which rows it makes or where they go: changed between two batches of
# one launch, the batches before and after would mean different things under the same job, so it is refused
IGNORED_FIELDS = ("trigger", "max_offsets_per_trigger", "start", "checkpoint_dir", "commit_to_group", "stop_grace",
                  "interval_table", "quality", "schedule", "quality_schedule", "health", "announce_every", "spark")
RULES = ("min", "max", "in_", "pattern", "max_length", "field")  # a column's checks, besides its type and required
RESTART = "Restart the stream to apply it"


@dataclass(frozen=True)
class Refusal:
    """One change the running stream refuses, as OptionError names it: the entry's field, its new value, what is
    wrong with changing it now, and what to do."""

    option: str
    value: object
    problem: str
    fix: str


@dataclass(frozen=True)
class EntryChanges:
    """The verdict on an entry read again, against the entry the stream runs."""

    spec: PipelineSpec  # what the stream runs once it follows the changes (the running entry when none)
    followed: tuple[str, ...] = ()  # each change it follows, described
    refused: tuple[Refusal, ...] = ()
    ignored: tuple[str, ...] = ()  # the fields changed that the next launch applies

    @property
    def acted_on(self) -> bool:
        """The stream stops between batches for these changes: to follow them, or to fail on them."""
        return bool(self.followed or self.refused)

    def error(self) -> OptionError:
        """The refusal as the stream fails with it: the first change refused, naming the others."""
        first, rest = self.refused[0], self.refused[1:]
        others = f" (also refused: {', '.join(r.option for r in rest)})" if rest else ""
        return OptionError(first.option, first.value, first.problem + others, first.fix)


def compare(running: PipelineSpec, fresh: PipelineSpec, table: str) -> EntryChanges:
    """`fresh` (the entry read again, its registry columns resolved) against `running` (what the stream runs,
    writing `table`)."""
    where = f"in entry {running.name!r} while its stream ran"
    fields = [name for name in PipelineSpec.model_fields if getattr(running, name) != getattr(fresh, name)]
    refused = [Refusal(name, getattr(fresh, name), f"changed from {getattr(running, name)!r} {where}; a running "
                       "stream keeps how it reads records, which rows they make and where those go", RESTART)
               for name in fields if name not in ("name", *FOLLOWED_FIELDS, *IGNORED_FIELDS)]
    followed: list[str] = []
    for name in [*running.columns, *(n for n in fresh.columns if n not in running.columns)]:
        change = _column(name, running.columns.get(name), fresh.columns.get(name), fresh.key, table, where)
        if isinstance(change, Refusal):
            refused.append(change)
        elif change:
            followed.append(change)
    ignored = tuple(name for name in fields if name in IGNORED_FIELDS)
    if refused or not followed:
        return EntryChanges(running, (), tuple(refused), ignored)
    return EntryChanges(_following(running, fresh), tuple(followed), (), ignored)


def _column(name: str, was: ColumnSpec | None, now: ColumnSpec | None, key: list[str], table: str,
            where: str) -> str | Refusal | None:
    """One column's change: what the stream follows (described), a refusal, or None when it is the same."""
    if now is None:
        return Refusal(f"columns.{name}", None, f"was removed from {where.removeprefix('in ')}; a running stream "
                       "only adds columns",
                       f"{RESTART} (the table keeps the column, and rows written from then on leave it null)")
    if was is None:
        if name in key:
            return None  # the key changed with it, which is refused as such
        if now.required:
            return Refusal(f"columns.{name}.required", True, f"is set on the new column {name} {where}; a running "
                           "stream adds only optional columns", f"{RESTART} (the launch adds the column, and records "
                           "without it become dead letters from then on)")
        return f"column {name} {now.type} added"
    if was == now:
        return None
    old, new = was.column_type, now.column_type
    if old != new:
        if widening(old.postgres, new.postgres) is None:
            return _retyped(name, str(old), str(new), old.postgres, new.postgres, table, where)
        described = f"column {name} widened from {old} to {new}"
    else:
        described = ""
    if now.required and not was.required:
        return Refusal(f"columns.{name}.required", True, f"was false {where}; records without {name}, valid until "
                       "now, would become dead letters from one batch to the next", RESTART)
    if name in key and (was.field or name) != (now.field or name):
        return Refusal(f"columns.{name}.field", now.field, f"changed from {was.field!r} {where}; {name} is part of "
                       "the key, and a running stream keeps which field keys its rows (its batches before and after "
                       "would key one record two ways)", RESTART)
    rules = [rule.rstrip("_") for rule in RULES if getattr(was, rule) != getattr(now, rule)]
    rules += ["required"] if was.required and not now.required else []
    if rules:
        described = "; ".join(filter(None, [described, f"column {name}'s {', '.join(rules)} changed"]))
    return described or None


def _retyped(name: str, old: str, new: str, old_pg: str, new_pg: str, table: str, where: str) -> Refusal:
    """A type changed to one that does not safely widen the old one."""
    if holds_every_value(old_pg, new_pg):
        fix = f"{RESTART}: the table's column stays {old_pg}, which holds every {new} value"
    else:
        column = _quoted(name)
        fix = (f"Change the table's column at a quiet time (ALTER TABLE {'.'.join(map(_quoted, table.split('.')))} "
               f"ALTER COLUMN {column} TYPE {new_pg} USING {column}::{new_pg}), then restart the stream")
    return Refusal(f"columns.{name}.type", new, f"was {old} {where}, and {old} to {new} is no safe widening (a "
                   "running stream widens int to bigint, and decimal(p,s) to one with as many digits before and "
                   "after the point or more)", fix)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _following(running: PipelineSpec, fresh: PipelineSpec) -> PipelineSpec:
    """The running entry with the fresh entry's columns (and the registry schema they came from): every field the
    stream does not follow stays as the launch read it."""
    spec = running.model_copy(update={"columns": dict(fresh.columns)})
    spec._folder, spec._registry_reader = running._folder, fresh.registry_reader_schema
    return spec

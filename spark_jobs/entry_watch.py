"""A running stream's entry, read again while it runs: the jobs file every ENTRY_EVERY_S, and for an entry whose
columns come from a schema registry subject, the subject's latest version every REGISTRY_EVERY_S (or at once when
the entry itself changed). Each read is judged against the entry the stream runs (`entry_changes.compare`); what
the stream leaves for the next launch, or cannot read now, is said once."""

from __future__ import annotations

import time
from collections.abc import Callable

from streamfill.errors import StreamfillError
from streamfill.spark_jobs.entry_changes import EntryChanges, compare
from streamfill.spark_jobs.launch_args import entry_of
from streamfill.spark_jobs.pipelines import PipelineSpec, registry

# the jobs file is a local file, cheap to read and parse: often enough that a change is seen within a few
# batches, seldom enough to cost nothing beside them
ENTRY_EVERY_S = 5.0
# a subject's latest version is a request to a service every stream and producer shares, and schemas change rarely
REGISTRY_EVERY_S = 60.0


class EntryWatch:
    """The entry of a stream's job (`pipeline`, else the one named like `job`), read again on a schedule; the
    stream calls `check` between its looks at the query and `adopt` once it runs what a check followed."""

    def __init__(self, job: str, pipeline: str | None, table: str, entry: PipelineSpec, running: PipelineSpec,
                 say: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.job, self.pipeline, self.table, self.say, self.clock = job, pipeline, table, say, clock
        self.running = running  # what the stream runs: the launch's entry, with the changes it followed since
        self._entry, self._resolved = entry, running  # the entry last read, and its registry columns resolved
        now = clock()
        self._next_read, self._next_registry = now + ENTRY_EVERY_S, now + REGISTRY_EVERY_S
        self._said: set[str] = set()

    def check(self) -> EntryChanges | None:
        """When a read is due: the changes the stream acts on (follows, or fails on), else None."""
        now = self.clock()
        if now < self._next_read:
            return None
        self._next_read = now + ENTRY_EVERY_S
        try:
            fresh = self._read(now)
        except (StreamfillError, ValueError) as exc:  # a file saved half-way, an entry renamed, a registry outage
            self._once(f"stream {self.job}: its entry cannot be read now ({' '.join(str(exc).split())}); it goes on "
                       "with the entry it runs")
            return None
        changes = compare(self.running, fresh, self.table)
        if changes.ignored:
            self._once(f"stream {self.job}: {', '.join(changes.ignored)} changed in its entry; a running stream "
                       "keeps its own, and the next launch applies them")
        return changes if changes.acted_on else None

    def adopt(self, spec: PipelineSpec) -> None:
        """The stream runs `spec` now: later reads are judged against it."""
        self.running = spec

    def _read(self, now: float) -> PipelineSpec:
        entry = entry_of(self.job, self.pipeline)
        if not entry.columns_from_registry:
            return entry
        if entry != self._entry or now >= self._next_registry:
            self._next_registry = now + REGISTRY_EVERY_S  # asked again no sooner, whether it answers or not
            self._resolved = registry.resolved(entry)
            self._entry = entry
        return self._resolved

    def _once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.say(message)

"""What a stream's and a backfill's arguments share: the jobs file's entry they run, and how long a launch waits
for the job (--wait-for-job)."""

from __future__ import annotations

from functools import cached_property

from streamfill import durations
from streamfill.errors import OptionError
from streamfill.spark_jobs import pipelines
from streamfill.spark_jobs.pipelines import PipelineSpec, registry


def entry_of(job: str, pipeline: str | None) -> PipelineSpec:
    """The jobs file's entry a launch runs: the one --pipeline names, else the one named like --job."""
    return pipelines.entry(pipeline or job, "--pipeline" if pipeline else "--job")


class NamesAnEntry:
    """The arguments of a launch that runs a jobs file's entry: `pipeline`, else the one named like `job`."""

    @cached_property
    def entry(self) -> PipelineSpec:
        """The entry, read from the jobs file once per argument set."""
        return entry_of(self.job, self.pipeline)

    @cached_property
    def spec(self) -> PipelineSpec:
        """The entry as the launch runs it: an entry that names a registry subject instead of columns gets the
        columns of the subject's latest version, looked up once, here."""
        return registry.resolved(self.entry)

    def require_entry(self) -> None:
        """Refuse arguments naming an entry the jobs file does not have (reading it refuses them)."""
        _ = self.entry


def wait_seconds(raw: str) -> float:
    """--wait-for-job: 0 refuses at once when another launch holds the job; 30s, 10m, 1h wait that long."""
    ms = durations.parse_ms(str(raw), default_unit="s")
    if ms is None:
        raise OptionError("--wait-for-job", raw, "is not a duration", "use 0 (refuse at once), 30s, 10m or 1h")
    return ms / 1000

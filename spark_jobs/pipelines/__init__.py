"""Pipelines: one YAML entry per topic (docs/pipelines.md) becomes typed rows and dead letters
(`compile`), a table,
and quality checks from the same rules (`expectations`). `load` reads every entry of the jobs file."""

from streamfill.spark_jobs.pipelines.columns import ColumnSpec
from streamfill.spark_jobs.pipelines.jobs_file import JobsFileError, jobs_file, load, read
from streamfill.spark_jobs.pipelines.nested_specs import HealthSpec
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

__all__ = ["ColumnSpec", "HealthSpec", "JobsFileError", "PipelineSpec", "entry", "jobs_file", "load", "read"]


def entry(name: str, option: str = "--pipeline") -> PipelineSpec:
    """The jobs file's entry `name`, or an OptionError listing the entries there are."""
    from streamfill.errors import OptionError

    entries = load()
    if name not in entries:
        raise OptionError(option, name, f"is not an entry of the jobs file {jobs_file()}",
                          f"use one of {', '.join(sorted(entries)) or 'none yet'}, or add an entry under jobs:")
    return entries[name]

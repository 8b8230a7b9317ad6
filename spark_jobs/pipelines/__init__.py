"""Pipelines: one YAML entry per topic (docs/pipelines.md) becomes typed rows and dead letters
(`compile`), a table,
and quality checks from the same rules (`expectations`). `load` reads every entry of the jobs file."""

from streamfill.spark_jobs.pipelines.columns import ColumnSpec
from streamfill.spark_jobs.pipelines.jobs_file import (
    BrokenEntry,
    Entries,
    JobsFileError,
    jobs_file,
    load,
    load_each,
    read,
    read_each,
)
from streamfill.spark_jobs.pipelines.nested_specs import HealthSpec
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

__all__ = ["BrokenEntry", "ColumnSpec", "Entries", "HealthSpec", "JobsFileError", "PipelineSpec", "entry", "jobs_file",
           "load", "load_each", "read", "read_each"]


def entry(name: str, option: str = "--pipeline") -> PipelineSpec:
    """The jobs file's entry `name`: its own error if it is broken (another entry's never stops it), or an
    OptionError listing the entries there are."""
    return load_each().spec(name, option)

"""The jobs file's entries on the Airflow side, each one on its own. Airflow records an import error per DAG file
and marks every DAG of a file that has one stale, however many it loaded (airflow/dag_processing/collection.py,
`_update_import_errors`): so dags/streamfill_dags.py builds the DAGs of every entry that can be used
(`usable`), and the broken ones are the import error of a file of their own, dags/streamfill_broken_entries.py
(`refuse_broken`), which makes no DAG."""

from __future__ import annotations

import logging
from pathlib import Path

from streamfill.errors import BAD_INPUT, StreamfillError
from streamfill.orchestration.jobs_file_variable import pin
from streamfill.spark_jobs.pipelines import BrokenEntry, JobsFileError, PipelineSpec, load_each

log = logging.getLogger(__name__)


class BrokenEntries(StreamfillError):
    """Entries of the jobs file that cannot become DAGs; the message names each with its file, field, value and
    fix."""

    kind = BAD_INPUT


def usable() -> dict[str, PipelineSpec]:
    """The entries to build DAGs of, from the jobs file this Airflow uses (pinned for the tasks, `pin`); each
    broken one is left out and said in the file's parse log."""
    found = load_each(pin())
    for broken in found.broken:
        log.warning("streamfill: no DAGs for %s (dags/streamfill_broken_entries.py's import error names it)",
                    broken.error)
    return found.specs


def refuse_broken() -> None:
    """Raise BrokenEntries naming every entry that cannot become DAGs; return when none is. A jobs file that is not
    there at all is dags/streamfill_dags.py's own import error."""
    try:
        path = pin()
    except JobsFileError:
        return
    found = load_each(path)
    if found.broken:
        raise BrokenEntries(describe(path, found.broken))


def describe(path: Path, broken: tuple[BrokenEntry, ...]) -> str:
    one = len(broken) == 1
    return (f"{len(broken)} broken entr{'y' if one else 'ies'} in the jobs file {path} and its jobs.d/: no DAGs for "
            f"{'it' if one else 'them'} until fixed, while every other entry's DAGs load and run (`streamfill jobs "
            "check` names the same):\n" + "\n".join(f"- {' '.join(str(b.error).split())}" for b in broken))

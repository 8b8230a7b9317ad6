"""Which jobs a user of the page may see, as Airflow's auth manager decides per DAG (auth.AirflowReader asks it).

A job's DAGs: those streamfill makes for its entry (the entry named like the job, or the one a window, replay or
backfill is named after: `orders.interval.…`), and every DAG offsets_db recorded as having launched it
(runs.dag_id) but the replay form all entries share. A user sees a job when Airflow lets them read the runs of
one of its DAGs: a team's roles name its entries' DAGs, and whoever may read a DAG's runs already sees in Airflow
what they launched. A job with no such DAG (a CLI launch under a name of its own) is shown to those who may read
every DAG.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sqlalchemy import Engine, select

from streamfill import dag_ids
from streamfill.names import WINDOW
from streamfill.offsets_db.models import Job, Run
from streamfill.spark_jobs.pipelines import PipelineSpec


class Reader(Protocol):
    """One user's answers from Airflow's auth manager."""

    def readable(self, dag_ids: set[str]) -> set[str]:
        """The DAGs among `dag_ids` whose runs the user may read."""

    def reads_every_dag(self) -> bool:
        """Whether the user may read the runs of every DAG Airflow has."""


# the jobs streamfill names after an entry: `<entry>.<kind>.<window or digest>` (streamfill.names.window_job,
# spark_jobs.backfill_args.backfill_job)
NAMED_AFTER_ENTRY = (WINDOW, "replay", "backfill")


def entry_of(name: str, specs: dict[str, PipelineSpec]) -> PipelineSpec | None:
    """The jobs file's entry of job `name`: its own, or that of a window, replay or backfill named after it."""
    if name in specs:
        return specs[name]
    parts = name.rsplit(".", 2)
    return specs.get(parts[0]) if len(parts) == 3 and parts[1] in NAMED_AFTER_ENTRY else None


def dags_of(name: str, specs: dict[str, PipelineSpec], recorded: Iterable[str]) -> set[str]:
    """The entry's own DAGs and those recorded as launching the job, but the replay form every team shares: who
    may read it is no reason to see each entry's replays."""
    spec = entry_of(name, specs)
    made = dag_ids.of_entry(spec.name, spec.windowed) if spec is not None else []
    return {*made, *(d for d in recorded if d != dag_ids.REPLAY)}


def recorded_dags(engine: Engine, names: list[str] | None = None) -> dict[str, set[str]]:
    """Every job (or the jobs named) with the DAGs offsets_db recorded as having launched it (maybe none)."""
    query = select(Job.name, Run.dag_id).outerjoin(Run, Run.job_id == Job.id).distinct()
    if names is not None:
        query = query.where(Job.name.in_(names))
    out: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for name, dag_id in conn.execute(query):
            out.setdefault(name, set()).update([dag_id] if dag_id else [])
    return out


class Access:
    """What one request's user may see; each answer of the auth manager is asked for once per request."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def visible(self, jobs: dict[str, set[str]], specs: dict[str, PipelineSpec]) -> set[str]:
        """The names among `jobs` (name: its recorded DAGs) the user may see."""
        dags = {name: dags_of(name, specs, recorded) for name, recorded in jobs.items()}
        readable = self.reader.readable(set().union(*dags.values())) if dags else set()
        return {name for name, own in dags.items() if (own & readable if own else self.reader.reads_every_dag())}

    def jobs(self, engine: Engine, specs: dict[str, PipelineSpec]) -> set[str]:
        """The jobs of offsets_db the user may see, each by its own DAGs as `may_see` decides it (a job whose DAGs
        this Airflow no longer has stays hidden from those who may read only the DAGs it has)."""
        return self.visible(recorded_dags(engine), specs)

    def may_see(self, engine: Engine, specs: dict[str, PipelineSpec], name: str) -> bool:
        return name in self.visible({name: recorded_dags(engine, [name]).get(name, set())}, specs)

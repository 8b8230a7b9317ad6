"""A launch's `runs` row in offsets_db, from its start to how it ended, with its OpenLineage run alongside."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from streamfill.offsets_db.fencing import Lease
from streamfill.offsets_db.store import OffsetStore
from streamfill.spark_jobs.lineage_io import LineageIO


@dataclass
class RunRow:
    id: int
    status: str = "succeeded"  # the body sets "stopped" when it ended on request
    lineage: object | None = None  # the launch's OpenLineage run (spark_jobs.lineage.LineageRun)


@contextmanager
def recorded_run(store: OffsetStore, job: str, spark_app_id: str | None = None,
                 lease: Lease | None = None, io: LineageIO = LineageIO()) -> Iterator[RunRow]:
    """A `runs` row for this launch (which holds the job: `lease`), with Airflow's dag and run ids when Airflow
    launched it (it exports AIRFLOW_CTX_* to the tasks it runs). Ends as succeeded, stopped (on request or
    Ctrl-C) or failed. Its OpenLineage run (when lineage is configured: spark_jobs/lineage.py) starts and ends
    with it, under the parent run OPENLINEAGE_PARENT_ID names; launches found lost end as ABORT."""
    from streamfill.spark_jobs import lineage
    from streamfill.spark_jobs.lineage_events import Parent

    parent = Parent.parse(os.environ)
    lineage_id, lost = lineage.new_run_id(), []
    run = RunRow(store.start_run(job, dag_id=os.environ.get("AIRFLOW_CTX_DAG_ID"),
                                 airflow_run_id=os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"), spark_app_id=spark_app_id,
                                 lease=lease, lineage_run_id=lineage_id, on_lost=lost.extend))
    for old in lost:
        lineage.aborted(job, old, io.inputs, io.outputs, processing=io.processing,
                        reason="the launch ended without saying so (killed or its machine lost); found by the next")
    try:
        with lineage.launch_run(job, io.inputs, io.outputs, parent=parent, run_id=lineage_id,
                                processing=io.processing) as run.lineage:
            yield run
    except KeyboardInterrupt:
        run.status = "stopped"
        raise
    except BaseException:
        run.status = "failed"
        raise
    finally:
        store.end_run(run.id, run.status)

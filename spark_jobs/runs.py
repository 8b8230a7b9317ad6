"""What the stream and the backfill share around Spark: the run row in offsets_db and the sink's options."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from offsets_db.store import OffsetStore


def sink_options(job: str, table: str, mode: str, url: str) -> dict[str, str]:
    """Valid rows to `table`, dead letters to offsets_db.dead_letters, offsets committed in the same transaction."""
    return {"table": table, "job": job, "mode": mode, "deadLetters": "true", "url": url}


@dataclass
class RunRow:
    id: int
    status: str = "succeeded"  # the body sets "stopped" when it ended on request


@contextmanager
def recorded_run(store: OffsetStore, job: str, spark_app_id: str | None = None) -> Iterator[RunRow]:
    """A `runs` row for this launch, with Airflow's dag and run ids when Airflow launched it (it exports
    AIRFLOW_CTX_* to the tasks it runs). Ends as succeeded, stopped (on request or Ctrl-C) or failed."""
    run = RunRow(store.start_run(job, dag_id=os.environ.get("AIRFLOW_CTX_DAG_ID"),
                                 airflow_run_id=os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"), spark_app_id=spark_app_id))
    try:
        yield run
    except KeyboardInterrupt:
        run.status = "stopped"
        raise
    except BaseException:
        run.status = "failed"
        raise
    finally:
        store.end_run(run.id, run.status)

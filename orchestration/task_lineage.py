"""The OpenLineage run of the Airflow task running now, so that the events of the job it launches join the
provider's in one graph."""

from __future__ import annotations

import os


def lineage_parent(context=None):
    """The OpenLineage run of the Airflow task running now (spark_jobs.lineage_events.Parent), with the ids
    Airflow's OpenLineage provider gives the task and its DAG run, so the job's events join the provider's in one
    graph; None outside a task. The namespace is the provider's: OPENLINEAGE_NAMESPACE, else `default`."""
    from streamfill.spark_jobs.lineage_events import Parent, airflow_dag_run_id, airflow_task_run_id

    if context is None:
        from airflow.sdk import get_current_context

        try:
            context = get_current_context()
        except Exception:  # not inside a task (a CLI launch): no parent
            return None
    ti, dag_run = context["ti"], context["dag_run"]
    namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or "default"
    instant = dag_run.logical_date or dag_run.run_after
    task_run = airflow_task_run_id(namespace, ti.dag_id, ti.task_id, ti.try_number, ti.map_index, instant)
    dag_run_id = airflow_dag_run_id(namespace, ti.dag_id, getattr(dag_run, "clear_number", 0) or 0, instant)
    return Parent(namespace, f"{ti.dag_id}.{ti.task_id}", task_run, namespace, ti.dag_id, dag_run_id)

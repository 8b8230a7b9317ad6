"""Placeholder until the streamfill DAG factory lands: proves the DAGs folder parses."""

from airflow.sdk import DAG, task

with DAG(dag_id="streamfill_placeholder", schedule=None, catchup=False, tags=["streamfill"]):

    @task
    def hello() -> str:
        return "streamfill"

    hello()

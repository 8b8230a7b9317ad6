"""streamfill's Airflow DAGs, made from the jobs file by orchestration.dags (its docstring lists them). An Airflow
that installed the streamfill wheel puts these same lines in its own DAG folder."""

from streamfill.orchestration.dags import build

globals().update(build())

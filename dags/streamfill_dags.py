"""streamfill's Airflow DAGs, made from the jobs file by orchestration.dags (its docstring lists them), one set per
entry that can be used; a broken entry is the import error of streamfill_broken_entries.py instead. An Airflow
that installed the streamfill wheel puts these same lines in its own DAG folder, with that file beside them."""

from streamfill.orchestration.dags import build

globals().update(build())

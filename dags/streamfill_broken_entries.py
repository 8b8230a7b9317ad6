"""The jobs file's entries that cannot become DAGs, as this file's one import error in Airflow, naming each with
its file, field, value and fix (orchestration/broken_entries.py); no error while every entry is sound. Airflow
marks all DAGs of a file with an import error stale, so the other entries' DAGs come from streamfill_dags.py and
run. An Airflow that installed the streamfill wheel puts these same lines in its own DAG folder, beside that file."""

from streamfill.orchestration.broken_entries import refuse_broken

refuse_broken()

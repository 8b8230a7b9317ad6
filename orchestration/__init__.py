"""The Airflow side, next to dags/: the DAGs and what their tasks do, kept out of the DAG files, so an Airflow that
installed the wheel needs one short DAG file of its own."""

from streamfill import extras

# first: an install without the Airflow role (`pip install streamfill`, Spark's executors) is told which extra to
# install instead of failing later on a module of Airflow's
extras.require(extras.AIRFLOW, "streamfill.orchestration (the Airflow side: DAGs, operators, the streamfill page)")

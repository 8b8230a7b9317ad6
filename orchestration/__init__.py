"""The Airflow side, next to dags/: the DAGs and what their tasks do, kept out of the DAG files, so an Airflow that
installed the wheel needs one short DAG file of its own."""

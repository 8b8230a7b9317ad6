"""The Airflow side, next to dags/: the DAGs (`dags`, their ids in `dag_ids`), what their tasks do (`tasks`), the
jobs file they are generated from (`jobs_file`), and a client of Airflow's REST API (`airflow_api`). DAG files
stay thin and import from here, so an Airflow that installed the wheel needs one short file of its own."""

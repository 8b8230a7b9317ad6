"""The Airflow side, next to dags/: what the DAGs' tasks do (`tasks`), the jobs file they are generated from
(`jobs_file`), and a client of Airflow's REST API (`airflow_api`). DAG files stay thin and import from here."""

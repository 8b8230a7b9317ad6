-- Airflow's metadata database beside the offsets database, owned by the same role.
CREATE DATABASE airflow OWNER streamfill;

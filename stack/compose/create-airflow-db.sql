-- Airflow's metadata database beside the offsets database, owned by the same role.
CREATE DATABASE airflow OWNER streamfill;
-- A table a job names without a schema lands in public: "$user" would otherwise find offsets_db's schema first,
-- role and schema both being named streamfill (docs/infrastructure.md).
ALTER ROLE streamfill SET search_path = public, streamfill;

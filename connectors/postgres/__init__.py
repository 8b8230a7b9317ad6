"""The Postgres side of the `streamfill_postgres` sink: target and staging tables, and COPY encoding."""

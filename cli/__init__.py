"""The top layer: the `streamfill` command (`main.py`, one module per command group in `commands/`) and the local
stack it runs (`stack/`: PostgreSQL, Kafka, the schema registry, Airflow, Spark). Nothing imports it."""

"""The app, on top of every other layer: the `streamfill` command (`cli.py`, one module per command group in
`commands/`) and the local stack it runs (`stack/`: PostgreSQL, Kafka, Airflow, Spark). Nothing imports it."""

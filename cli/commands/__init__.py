"""The `streamfill` command groups, one module each: stack, db, offsets, produce, jobs (stream and backfill),
demo. Heavy imports (Spark, SQLAlchemy, Kafka clients) happen inside the commands, so `--help` is quick."""

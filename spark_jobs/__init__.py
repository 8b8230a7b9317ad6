"""PySpark jobs: the long-running stream, the bounded backfill and what they share."""

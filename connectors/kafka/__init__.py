"""Kafka planning and reading in plain Python: no Spark import anywhere below this package."""

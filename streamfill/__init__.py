"""streamfill: Kafka batch-plus-streaming on PySpark, Airflow and PostgreSQL."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

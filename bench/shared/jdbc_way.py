"""The hand-written alternative the benchmarks measure streamfill against: Spark's JDBC writer in foreachBatch."""

from __future__ import annotations

from sqlalchemy import make_url


def jdbc_target(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection properties of a SQLAlchemy PostgreSQL URL."""
    u = make_url(url)
    jdbc = f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}"
    return jdbc, {"user": u.username or "", "password": u.password or "", "driver": "org.postgresql.Driver"}


def jdbc_writer(jdbc: str, name: str, props: dict[str, str]):
    """The hand-written way's foreachBatch: valid rows to `name`, dead letters to `name`_dead, by Spark's JDBC
    writer (at-least-once: a batch replayed after a failure is written again)."""
    def write(batch, batch_id: int) -> None:
        batch.persist()
        batch.filter("_error IS NULL").drop("_error", "_raw").write.jdbc(jdbc, name, "append", props)
        (batch.filter("_error IS NOT NULL")
         .selectExpr("topic", "partition", "offset", "_raw AS raw_value", "_error AS error")
         .write.jdbc(jdbc, f"{name}_dead", "append", props))
        batch.unpersist()

    return write

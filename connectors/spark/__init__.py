"""The thin PySpark layer over the connector core."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `streamfill_kafka` and `streamfill_postgres` available to this session's readers and writers, and
    make it the calling thread's active session: a streaming writer looks Python data sources up in the thread's
    active session, which in a new thread can be a streaming query's clone made before the registration (a
    foreachBatch query's, say) or none."""
    from streamfill.connectors.spark.postgres_sink import PostgresSink
    from streamfill.connectors.spark.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(PostgresSink)
    activate_session(spark)


def activate_session(spark: SparkSession) -> None:
    """Make `spark` the calling thread's active session, where Spark looks Python data sources up: PySpark has no
    public call for it, and a thread the session did not start has none of its own. A Spark Connect session has
    no such thread: the server looks them up in the session the client registered them in."""
    if is_connect(spark):
        return
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect client's session (its driver is a server's, not this process's)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def hold_job(job: str, url: str | None = None, *, kind: str = "backfill", wait: float = 0) -> Iterator[int]:
    """Take `job` for this launch (docs/guarantees.md, "One launch of a job at a time") and give its generation, for the
    `jobGeneration` option of a
    bounded read and write of your own; the job is free again when the block ends.

        with hold_job("orders-replay") as generation:
            df = spark.read.format("streamfill_kafka")...option("job", "orders-replay")
                .option("jobGeneration", generation).load()
            df.write.format("streamfill_postgres")...option("job", "orders-replay")
                .option("jobGeneration", generation).save()
    """
    from streamfill.offsets_db.store import OffsetStore
    from streamfill.settings import default_db_url

    store = OffsetStore(url or default_db_url())
    store.ensure_job(job, kind)
    try:
        with store.hold(job, wait_s=wait) as lease:
            yield lease.generation
    finally:
        store.engine.dispose()

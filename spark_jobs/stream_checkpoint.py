"""A stream's checkpoint that planning refused (a stale copy, another job's): found in the query's failure, and set
aside so the stream resumes where offsets_db says."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from streamfill.errors import CheckpointMismatch, ForeignCheckpoint, StreamfillError

log = logging.getLogger("streamfill.stream")

REFUSED_CHECKPOINT = tuple(f"{cls.__module__}.{cls.__name__}" for cls in (CheckpointMismatch, ForeignCheckpoint))


def refused_checkpoint(failure) -> str | None:
    """The line of a query's failure saying that planning refused its checkpoint (a stale copy, another job's);
    None for any other failure, or none."""
    if failure is None:
        return None
    lines = without_jvm_stack(failure).splitlines()
    return next((line for line in lines if any(name in line for name in REFUSED_CHECKPOINT)), None)


def without_jvm_stack(failure) -> str:
    """A query's failure as Spark describes it (the Python traceback of a data source's error included), without
    the JVM's stack trace."""
    return str(failure).split("\n\nJVM stacktrace:", 1)[0]


def set_checkpoint_aside(spark, checkpoint: Path | str, why: str) -> str:
    """Rename the checkpoint beside itself (any file system Spark's Hadoop configuration reaches), logging what
    it held against offsets_db; returns the new location."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(str(checkpoint))
    target = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}.set-aside-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if not path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).rename(path, target):
        raise StreamfillError(f"{why}. Setting the checkpoint {checkpoint} aside failed: move it away and restart")
    log.warning("%s; the checkpoint is set aside as %s and the stream resumes from offsets_db", why, target)
    return target.toString()

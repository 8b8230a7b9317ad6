"""How a dead letter's reason shows the value that broke a rule, for every part of the parse that writes one."""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

NUL = "\u0000"


def shown(raw: SparkColumn) -> SparkColumn:
    """The value as a reason shows it: at most 200 characters, a NUL as U+FFFD (a reason must be storable text)."""
    return F.coalesce(F.substring(F.translate(raw, NUL, "\ufffd"), 1, 200), F.lit("null"))

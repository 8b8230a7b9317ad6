"""A select whose columns are sent to the JVM once and kept there: PySpark's own select sends every column, and
every column name, in a py4j call of its own each time, which a parse applied to every chunk repeats."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame


def select_sent_once(df: DataFrame, columns: Sequence[SparkColumn | str], sent: MutableMapping[str, object],
                     name: str) -> DataFrame:
    """df.select(*columns), with the JVM's Seq of the columns kept in `sent` under `name` and reused after; `sent`
    belongs to one session's JVM. Spark Connect has no JVM in this process: a plain select."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    if not isinstance(df, ClassicDataFrame):
        return df.select(*columns)
    if name not in sent:
        from pyspark.sql.classic.column import _to_java_column, _to_seq

        sent[name] = _to_seq(df.sparkSession.sparkContext, columns, _to_java_column)
    return ClassicDataFrame(df._jdf.select(sent[name]), df.sparkSession)

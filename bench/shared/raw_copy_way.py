"""The raw ceiling of bench/end_to_end.py, way (f): the same read and parse as streamfill, each task's rows
binary COPYed straight into an indexed table; no stage, no offsets, no exactly-once."""

from __future__ import annotations

from streamfill.spark_jobs.pipelines.compile import parse
from streamfill.spark_jobs.pipelines.typed_in_read import reader_options


def copy_straight(spark, bootstrap: str, source: str, url: str, name: str, spec) -> int:
    """The raw ceiling: the same read and parse, each task COPYing (binary) its valid rows straight into an
    indexed table and its dead letters into another; nothing staged, no offsets, no exactly-once."""
    import psycopg2
    from pyspark.sql import functions as F

    from streamfill.connectors.postgres.connection import dsn
    from streamfill.connectors.spark.pg_types import pg_type

    kafka = (spark.read.format("streamfill_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .options(**reader_options(spec)).load())
    parsed = parse(kafka, spec)
    fields = [f for f in parsed.schema.fields if f.name not in ("_error", "_raw")]
    names = [f.name for f in fields]
    conninfo = dsn(url)
    with psycopg2.connect(conninfo) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{name}" (' + ", ".join(f'"{f.name}" {pg_type(f.name, f.dataType)}' for f in fields)
                    + ', UNIQUE (topic, "partition", "offset"))')
        cur.execute(f'CREATE TABLE "{name}_dead" (topic text, "partition" integer, "offset" bigint, raw_value bytea, '
                    "error text)")

    def task(batches):
        import itertools

        import psycopg2
        import pyarrow as pa
        import pyarrow.compute as pc

        from streamfill.connectors.postgres import copy

        dead, seen = [], [0]

        def valid():
            for b in batches:
                seen[0] += b.num_rows
                bad = pc.is_valid(b.column("_error"))
                if pc.any(bad).as_py():
                    d = b.filter(bad)
                    dead.append(pa.record_batch([d.column(c) for c in ("topic", "partition", "offset", "_raw",
                                                                       "_error")],
                                                names=["topic", "partition", "offset", "raw_value", "error"]))
                yield b.filter(pc.invert(bad))

        conn = psycopg2.connect(conninfo)
        with conn.cursor() as cur:
            for table, cols, source_ in ((name, names, valid()), (f"{name}_dead",
                                         ["topic", "partition", "offset", "raw_value", "error"], None)):
                chunks = copy.encode(source_ if source_ is not None else iter(dead), cols, None)
                first = next(chunks, None)
                if first is not None:
                    columns = ", ".join(f'"{c}"' for c in cols)
                    cur.copy_expert(f'COPY "{table}" ({columns}) FROM STDIN WITH (FORMAT binary)',
                                    copy.CopySource(itertools.chain([first], chunks)))
        conn.commit()
        conn.close()
        yield pa.record_batch({"n": pa.array([seen[0]], pa.int64())})

    return parsed.mapInArrow(task, "n long").agg(F.sum("n")).first()[0]

"""The statements of bench/widening.py: the table it makes and fills, the changes it times, and how it puts
the table back after each round."""

from __future__ import annotations

REWRITE = "integer -> bigint"
CATALOG = ("numeric(10,2) -> numeric(14,2)", "ADD COLUMN text", "varchar(20) -> text")
CHANGES = (REWRITE, *CATALOG)
SHORT = dict(zip(CHANGES, ("rewrite", "numeric", "add column", "varchar"), strict=True))  # a round's line

CREATE = """CREATE TABLE {t} (topic text NOT NULL, {partition} integer NOT NULL, {offset} bigint NOT NULL,
    kafka_timestamp timestamptz, n integer, note text, amount numeric(10,2), code varchar(20),
    UNIQUE ({partition}, {offset}, topic))"""
# rows `first`..`last`: 4 partitions of one topic, each row's offset its number / 4, a note of about 45 bytes
FILL = """INSERT INTO {t} (topic, {partition}, {offset}, kafka_timestamp, n, note, amount, code)
    SELECT %(topic)s, (i %% 4)::int, i / 4, %(anchor)s::timestamptz + i * interval '1 ms', i::int,
           'order ' || i || ' ' || md5(i::text), ((i %% 1000000) / 100.0)::numeric(10,2),
           (ARRAY['EUR', 'USD', 'GBP'])[(i %% 3 + 1)::int]
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) i"""
ALTERS = {
    REWRITE: "ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
    CATALOG[0]: "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(14,2)",
    CATALOG[1]: "ALTER TABLE {t} ADD COLUMN extra text",
    CATALOG[2]: "ALTER TABLE {t} ALTER COLUMN code TYPE text",
}
LOCK = "LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE"
RESET = ("ALTER TABLE {t} ALTER COLUMN n TYPE integer, ALTER COLUMN amount TYPE numeric(10,2), "
         "ALTER COLUMN code TYPE varchar(20), DROP COLUMN extra")
# the table rewritten with its rows as RESET leaves them (VACUUM FULL forms each row again, the added column null)
PACK = ("ALTER TABLE {t} ADD COLUMN extra text", "VACUUM FULL {t}", "ALTER TABLE {t} DROP COLUMN extra")
READ = "SELECT count(*) FROM {t} WHERE {offset} = %s"


def statement(template: str, table: str):
    from psycopg2 import sql

    return sql.SQL(" ".join(template.split())).format(t=sql.Identifier(table), partition=sql.Identifier("partition"),
                                                      offset=sql.Identifier("offset"))

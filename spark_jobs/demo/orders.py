"""The `orders` pipeline of the demo: parse and validate order events with an explicit schema, and the
Great Expectations that check the same rules on the table.

`parse_events(kafka_df)` keeps Kafka's coordinates (topic, partition, offset, kafka_timestamp), the typed
fields, and two columns the `streamfill_postgres` sink understands with `deadLetters=true`: `_error` (null for
a valid row, else the first rule it breaks) and `_raw` (the original bytes of an invalid record, null for a
valid one: they are not worth staging).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.demo.events import CURRENCIES, EVENT_TYPES, FIELDS, MAX_AMOUNT

# every field read as text first, so a wrong type is a reason rather than a silent null
RAW_SCHEMA = ", ".join(f"{f} string" for f in FIELDS) + ", _corrupt string"
TABLE_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "event_id", "user_id", "event_type", "amount",
                 "currency", "event_time")


def _first_error(raw: Column, j: Column, typed: dict[str, Column]) -> Column:
    rules: list[tuple[Column, Column]] = [(j.isNull() | j["_corrupt"].isNotNull(), F.lit("invalid JSON"))]
    rules += [(j[f].isNull(), F.lit(f"missing field {f}")) for f in FIELDS]
    rules += [
        (typed["user_id"].isNull(), F.concat(F.lit("user_id is not an integer: "), j["user_id"])),
        (typed["amount"].isNull(), F.concat(F.lit("amount is not a number: "), j["amount"])),
        (typed["event_time"].isNull(), F.concat(F.lit("event_time is not an ISO-8601 time: "), j["event_time"])),
        ((typed["amount"] < 0) | (typed["amount"] > MAX_AMOUNT),
         F.concat(F.lit(f"amount out of range [0, {MAX_AMOUNT}]: "), j["amount"])),
        (~j["event_type"].isin(*EVENT_TYPES), F.concat(F.lit("unknown event_type: "), j["event_type"])),
        (~j["currency"].isin(*CURRENCIES), F.concat(F.lit("unknown currency: "), j["currency"])),
    ]
    out = F.lit(None).cast("string")
    for cond, reason in reversed(rules):  # the first rule broken wins
        out = F.when(cond, reason).otherwise(out)
    return F.when(raw.isNull(), F.lit("empty value")).otherwise(out)


def parse_events(kafka: DataFrame) -> DataFrame:
    raw = F.col("value").cast("string")
    j = F.from_json(raw, RAW_SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    df = kafka.select("topic", "partition", "offset", F.col("timestamp").alias("kafka_timestamp"),
                      F.col("value").alias("_raw"), j.alias("j"))
    j = F.col("j")
    typed = {
        "user_id": F.expr("try_cast(j.user_id AS bigint)"),
        "amount": F.expr("try_cast(j.amount AS decimal(12, 2))"),
        "event_time": F.expr("try_to_timestamp(j.event_time)"),
    }
    error = _first_error(F.col("_raw"), j, typed)
    return df.select(
        "topic", "partition", "offset", "kafka_timestamp",
        j["event_id"].alias("event_id"), typed["user_id"].alias("user_id"), j["event_type"].alias("event_type"),
        typed["amount"].alias("amount"), j["currency"].alias("currency"), typed["event_time"].alias("event_time"),
        error.alias("_error"),
        F.when(error.isNotNull(), F.col("_raw")).alias("_raw"))  # only dead letters carry their bytes onward


def expectations() -> list:
    """What the stream's rules promise about the table, as GX expectations (the platform adds key, uniqueness,
    reconciliation and freshness checks of its own)."""
    import great_expectations.expectations as gxe

    return [
        *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in FIELDS],
        gxe.UnexpectedRowsExpectation(
            description="event_id is unique",
            unexpected_rows_query="SELECT event_id, count(*) AS copies FROM {batch} GROUP BY event_id "
                                  "HAVING count(*) > 1"),
        gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=MAX_AMOUNT),
        gxe.ExpectColumnValuesToBeBetween(column="user_id", min_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="event_type", value_set=list(EVENT_TYPES)),
        gxe.ExpectColumnValuesToBeInSet(column="currency", value_set=list(CURRENCIES)),
        gxe.ExpectColumnValueLengthsToEqual(column="event_id", value=36),
    ]

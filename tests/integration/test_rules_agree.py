"""The rule in Spark and its expectation in Great Expectations agree: on the same generated rows, each rule's
expectation flags exactly the rows whose dead-letter reason names that rule."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest
from psycopg2 import sql

from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.spark_jobs.pipelines.compile import check
from streamfill.spark_jobs.pipelines.expectations import from_rules

pytestmark = pytest.mark.integration

SPEC = PipelineSpec(name="agree", topic="agree", table="agree", columns={
    "code": {"type": "string", "required": True, "pattern": "^[A-Z]+$", "max_length": 3},
    "amount": {"type": "decimal(10,2)", "min": 0, "max": 100},
    "qty": {"type": "int", "min": 1},
    "currency": {"type": "string", "in": ["EUR", "USD"]},
    "at": {"type": "timestamp", "min": "2026-01-01T00:00:00Z", "max": "2026-12-31T23:59:59Z"},
})
GOOD = {"code": "ABC", "amount": "50", "qty": 3, "currency": "EUR", "at": "2026-06-01T00:00:00Z"}
# values around each bound; every row breaks at most one rule
VARIANTS = [
    {}, {"amount": "0"}, {"amount": "100"}, {"amount": "100.01"}, {"amount": "-0.01"}, {"qty": 1}, {"qty": 0},
    {"qty": -5}, {"currency": "USD"}, {"currency": "GBP"}, {"currency": "eur"}, {"code": "AB"}, {"code": "ABCD"},
    {"code": "abc"}, {"code": None}, {"at": "2025-12-31T23:59:59Z"}, {"at": "2026-01-01T00:00:00Z"},
    {"at": "2027-01-01T00:00:00Z"}, {"amount": None}, {"currency": None},
]
RULE_OF = {  # expectation type -> how the dead letter's reason names that rule
    "expect_column_values_to_not_be_null": "missing field {c}",
    "expect_column_values_to_be_between": ("{c} below min", "{c} above max"),
    "expect_column_values_to_be_in_set": "{c} not in",
    "expect_column_values_to_match_regex": "{c} does not match pattern",
    "expect_column_value_lengths_to_be_between": "{c} longer than max_length",
}


def test_spark_rules_and_gx_expectations_flag_the_same_rows(spark, db, stack_settings):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    rows = []
    for i, change in enumerate(VARIANTS):
        record = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
        rows.append((None, json.dumps(record).encode(), "agree", 0, i, datetime(2026, 1, 1), 0))
    kafka = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long, "
                                        "timestamp timestamp, timestampType int")
    parsed = {r["offset"]: r for r in check(kafka, SPEC).collect()}  # typed values of rejected rows too
    assert not [r["_error"] for r in parsed.values() if r["_error"] and " is not a" in r["_error"]], \
        "every generated value has its column's type, so only rules decide"

    table = f"agree_{uuid.uuid4().hex[:8]}"
    raw = db.raw_connection()
    try:
        with raw.cursor() as cur:
            cur.execute(sql.SQL("CREATE TABLE {} (row_id bigint, code text, amount numeric(10,2), qty integer, "
                                "currency text, at timestamptz)").format(sql.Identifier(table)))
            for off, r in parsed.items():  # every row, rejected or not, with its typed values
                cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s)").format(sql.Identifier(table)),
                            (off, r["code"], r["amount"], r["qty"], r["currency"], r["at"]))
        raw.commit()
    finally:
        raw.close()

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = ctx.data_sources.add_postgres(name="agree", connection_string=stack_settings.offsets_db_url) \
        .add_table_asset(name=table, table_name=table).add_batch_definition_whole_table("all").get_batch()
    checked = 0
    for expectation in from_rules(SPEC):
        kind = expectation.expectation_type
        column = expectation.column
        result = batch.validate(expectation, result_format={"result_format": "COMPLETE",
                                                            "unexpected_index_column_names": ["row_id"]})
        gx_rows = {item["row_id"] for item in result.result.get("unexpected_index_list") or []}
        names = RULE_OF[kind]
        prefixes = tuple(n.format(c=column) for n in (names if isinstance(names, tuple) else (names,)))
        spark_rows = {off for off, r in parsed.items() if r["_error"] and r["_error"].startswith(prefixes)}
        assert gx_rows == spark_rows, f"{kind} on {column}: GX flags {sorted(gx_rows)}, Spark {sorted(spark_rows)}"
        checked += 1
    assert checked == 7  # not null, pattern, length, two betweens for amount/qty, in set, between for at
    with db.begin() as conn:
        conn.exec_driver_sql(f'DROP TABLE "{table}"')

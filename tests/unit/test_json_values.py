"""The reader's typing of JSON values (connectors.kafka.json_values): what it types, and every case it must leave
to Spark's parse because Spark could read it otherwise. tests/integration/test_typed_in_read.py checks the same
against Spark itself."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfill.connectors.kafka.json_values import JsonColumns
from streamfill.connectors.kafka.value_columns import ValueColumn
from streamfill.errors import OptionError
from streamfill.rules import rules_of

pytestmark = pytest.mark.unit

COLUMNS = JsonColumns((
    ValueColumn("id", "id", "string", rules_of({"required": True, "max_length": 8})),
    ValueColumn("n", "n", "int", rules_of({"min": 1, "max": 100})),
    ValueColumn("big", "big", "bigint"),
    ValueColumn("x", "x", "double", rules_of({"min": -1.5})),
    ValueColumn("amount", "amount", "decimal(12,2)", rules_of({"min": "0.00", "max": "1000.00"})),
    ValueColumn("wide", "wide", "decimal(30,4)"),
    ValueColumn("ok", "ok", "boolean"),
    ValueColumn("day", "day", "date", rules_of({"min": 0})),  # epoch days: 1970-01-01
    ValueColumn("at", "at", "timestamp"),
    ValueColumn("kind", "kind", "string", rules_of({"in": ("a", "b")})),
    ValueColumn("level", "level", "bigint", rules_of({"in": (1, 2, 3)})),
), reserved=("_corrupt",))
GOOD = {"id": "e1", "n": 5, "big": 2**40, "x": 2.5, "amount": 12.34, "wide": 1.5, "ok": True, "day": "2026-11-25",
        "at": "2026-11-25T08:20:55.991+00:00", "kind": "a", "level": 2}


def parse(*values: bytes | None) -> tuple[list[bool], dict[str, list]]:
    out = COLUMNS.parse(list(values))
    names = [c.name for c in COLUMNS.columns]
    return out[0].to_pylist(), {n: a.to_pylist() for n, a in zip(names, out[1:], strict=True)}


def record(**change) -> bytes:
    return json.dumps({k: v for k, v in {**GOOD, **change}.items() if v is not ...}).encode()


def test_a_valid_record_is_typed_as_spark_types_it():
    parsed, cols = parse(record())
    assert parsed == [True]
    assert cols["id"] == ["e1"] and cols["n"] == [5] and cols["big"] == [2**40] and cols["x"] == [2.5]
    assert cols["amount"] == [Decimal("12.34")] and cols["wide"] == [Decimal("1.5000")] and cols["ok"] == [True]
    assert str(cols["day"][0]) == "2026-11-25"
    assert cols["at"][0].isoformat() == "2026-11-25T08:20:55.991000+00:00"
    assert cols["kind"] == ["a"] and cols["level"] == [2]


def test_missing_fields_and_json_null_are_null_and_only_a_required_one_is_left_to_spark():
    parsed, cols = parse(record(n=..., amount=None), record(id=...), record(id=None))
    assert parsed == [True, False, False]
    assert cols["n"][0] is None and cols["amount"][0] is None


@pytest.mark.parametrize("change", [
    {"n": "5"},  # a number as text: Spark's cast has rules of its own (spaces, signs)
    {"n": True}, {"n": 5.0}, {"big": "7"}, {"ok": "true"}, {"x": "2.5"}, {"amount": "12.34"}, {"id": 7},
    {"at": 1700000000}, {"day": 20000},
])
def test_a_value_of_another_json_type_is_left_to_spark(change):
    assert parse(record(**change))[0] == [False]


@pytest.mark.parametrize("change", [
    {"n": 0}, {"n": 101}, {"x": -1.6}, {"amount": -0.01}, {"amount": 1000.01}, {"day": "1969-12-31"},
    {"kind": "c"}, {"kind": "A"}, {"level": 4}, {"id": "123456789"}, {"id": "a\u0000b"},
])
def test_a_broken_rule_is_left_to_spark_so_it_gives_the_reason(change):
    assert parse(record(**change))[0] == [False]


def test_bounds_are_inclusive_as_in_spark():
    parsed, _ = parse(record(n=1), record(n=100), record(x=-1.5), record(amount=0), record(amount=1000),
                      record(day="1970-01-01"), record(id="12345678"))
    assert parsed == [True] * 7


def test_integers_out_of_the_column_range_are_left_to_spark():
    parsed, cols = parse(record(n=2**31), record(n=-2**31), record(big=2**63), record(big=-2**63),
                         record(big=2**63 - 1))
    assert parsed == [False, False, False, True, True]
    assert cols["big"][3:] == [-2**63, 2**63 - 1]


def test_decimals_round_half_up_where_a_double_cannot_change_the_result():
    parsed, cols = parse(record(amount=1.004), record(amount=2.5), record(amount=0.126), record(amount=-0.0),
                         record(amount=7), record(amount=999.994))
    assert parsed == [True] * 6
    assert cols["amount"] == [Decimal("1.00"), Decimal("2.50"), Decimal("0.13"), Decimal("0.00"), Decimal("7.00"),
                              Decimal("999.99")]


def test_a_decimal_on_a_rounding_edge_is_left_to_spark():
    # 1.005 is the double 1.00499999999999989..., which Spark reads as the text "1.005" and rounds to 1.01;
    # 1.0049999999999999999 is the same double; 0.125 is a tie exactly
    values = [b'{"id": "e", "amount": 1.005}', b'{"id": "e", "amount": 1.0049999999999999999}',
              b'{"id": "e", "amount": 2.675}', b'{"id": "e", "amount": 0.125}', b'{"id": "e", "wide": 0.00005}']
    assert parse(*values)[0] == [False] * 5


def test_a_decimal_beyond_its_precision_is_left_to_spark():
    parsed, cols = parse(record(amount=10**10), record(amount=1e10), record(wide=10**26), record(wide=123456.78906))
    assert parsed == [False, False, False, True]
    assert cols["wide"][3] == Decimal("123456.7891")


@pytest.mark.parametrize("at,typed", [
    ("2026-11-25T08:20:55Z", True), ("2026-11-25 08:20:55.123456+05:30", True), ("2026-11-25T08:20:55+18:00", True),
    ("2026-11-25T08:20:55-00:00", True), ("0001-01-01T00:00:00Z", True),
    ("2026-11-25T08:20:55", False),  # no zone: the session's time zone decides in Spark
    ("2026-11-25T08:20:55.1234567Z", False), ("2026-11-25T08:20:55+19:00", False), ("2026-11-25", False),
    ("2026-02-30T00:00:00Z", False), ("2026-11-25T24:00:00Z", False), ("2026-11-25t08:20:55z", False),
    ("2026-11-25T08:20:55+0530", False), ("yesterday", False),
])
def test_times_in_a_form_both_parsers_read_alike_are_typed_the_others_left_to_spark(at, typed):
    parsed, cols = parse(record(at=at))
    assert parsed == [typed]
    if typed:
        assert cols["at"][0] == datetime.fromisoformat(at.replace("Z", "+00:00"))


def test_a_day_that_does_not_exist_is_left_to_spark_and_the_rest_of_the_batch_is_typed():
    parsed, cols = parse(record(day="2026-02-30"), record(day="2024-02-29"), record(at="2026-02-29T00:00:00Z"),
                         record())
    assert parsed == [False, True, False, True]
    assert str(cols["day"][1]) == "2024-02-29"


@pytest.mark.parametrize("value", [
    b"not json", b"", None, b'{"id": "e"} trailing', b"[1]", b'"text"', b"{'id': 'e'}", b'{"id": "e",}',
    b'{"id": "\\ud800"}', b'{"id": "e", "other": "\xff"}', b'{"id": "e\xff"}', b'\xef\xbb\xbf{"id": "e"}',
    b'{"id": "e", "amount": NaN}', b'{"id": "e", "x": 1e400}',
    b'{"id": "e", "_corrupt": "x"}',  # would fill Spark's corrupt-record column
    b'{"id": "e", "deep": ' + b"[" * 1000 + b"]" * 1000 + b"}",  # Jackson refuses nesting of 1,000
    b'{"id": "e", "long": 1' + b"0" * 1000 + b"}",  # and numbers of 1,000 digits, even in fields it skips,
    b'{"id": "e", "long": ' + b"1" * 600 + b"." + b"2" * 600 + b"}",  # counting a float's digits together
    b'{"id": "e", "x": 2' + b"0" * 600 + b"." + b"0" * 500 + b"e-600}",
    b'{"id": "e", "' + b"k" * 50_001 + b'": 1}',  # and key names of 50,000 characters
])
def test_values_spark_reads_its_own_way_are_left_to_spark(value):
    assert parse(value)[0] == [False]


def test_numbers_far_beyond_a_wide_decimal_are_left_to_spark_without_failing_the_batch():
    parsed, cols = parse(record(wide=1e94), record(wide=10**95), record(wide=1e300), record())
    assert parsed == [False, False, False, True] and cols["wide"][:3] == [None] * 3


def test_an_in_list_with_numbers_beyond_the_column_type_matches_only_what_fits():
    columns = JsonColumns((ValueColumn("n", "n", "int", rules_of({"in": (1, 3_000_000_000)})),
                           ValueColumn("b", "b", "bigint", rules_of({"in": (1, 2**63)}))))
    parsed = columns.parse([b'{"n": 1, "b": 1}', b'{"n": 2}', b"{}", b'{"b": 5}'])[0].to_pylist()
    assert parsed == [True, False, True, False]


def test_a_json_null_corrupt_key_and_a_long_value_of_plain_text_are_typed():
    long_text = b'{"id": "e", "note": "' + b"x" * 5000 + b'"}'
    assert parse(b'{"id": "e", "_corrupt": null}', long_text)[0] == [True, True]


def test_the_last_of_two_equal_keys_wins_as_in_spark():
    parsed, cols = parse(b'{"id": "first", "id": "last"}')
    assert parsed == [True] and cols["id"] == ["last"]


def test_the_option_round_trips_and_a_bad_one_names_the_option():
    assert JsonColumns.from_option(COLUMNS.to_option()) == COLUMNS
    with pytest.raises(OptionError, match="jsonColumns"):
        JsonColumns.from_option('{"columns": [{"name": "a"}]}')
    with pytest.raises(OptionError, match="jsonColumns"):
        JsonColumns.from_option('{"columns": [{"name": "a", "field": "a", "type": "array<int>"}]}')
    with pytest.raises(OptionError, match="unknown keys"):  # a rule the reader would not know is never dropped
        JsonColumns.from_option('{"columns": [{"name": "a", "field": "a", "type": "int", "minimum": 1}]}')
    with pytest.raises(OptionError, match="twice"):
        JsonColumns.from_option('{"columns": [{"name": "a", "field": "a", "type": "int"}, '
                                '{"name": "b", "field": "a", "type": "int"}]}')


def test_the_columns_spark_sees_are_named_and_typed():
    assert COLUMNS.spark_schema.startswith("_parsed boolean, `_p_id` string, `_p_n` int, `_p_big` bigint")
    assert "`_p_amount` decimal(12,2)" in COLUMNS.spark_schema and "`_p_at` timestamp" in COLUMNS.spark_schema


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*GOOD, "other"]), json_values, max_size=12))
def test_any_json_object_is_either_left_to_spark_or_typed_within_every_rule(doc):
    value = json.dumps({**GOOD, **doc}).encode()
    parsed, cols = parse(value)
    if not parsed[0]:
        return
    row = {k: v[0] for k, v in cols.items()}
    assert row["id"] is not None and len(row["id"]) <= 8 and "\x00" not in row["id"]
    assert row["n"] is None or 1 <= row["n"] <= 100
    assert row["x"] is None or row["x"] >= -1.5
    assert row["amount"] is None or Decimal("0") <= row["amount"] <= Decimal("1000")
    assert row["kind"] in (None, "a", "b") and row["level"] in (None, 1, 2, 3)
    for name in ("n", "big", "ok", "id", "kind", "level"):  # what was typed is what the JSON said
        assert row[name] == {**GOOD, **doc}.get(name)

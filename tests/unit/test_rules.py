"""What a rule means (streamfill.rules): the order, the reasons the docs show, the entry's form round trip, and
the read refusing a rule it does not check rather than dropping it."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from streamfill.connectors.kafka.value_columns import ValueColumn
from streamfill.rules import KEYS, BrokenWhen, Rule, as_mapping, rules_of
from streamfill.spark_jobs.pipelines import PipelineSpec

pytestmark = pytest.mark.unit

SPEC = PipelineSpec(name="payments", topic="payments", table="payments", key=["payment_id"], columns={
    "payment_id": {"type": "string", "max_length": 64},
    "amount": {"type": "decimal(12,2)", "max": 1000000, "min": 0, "required": True},
    "currency": {"type": "string", "in": ["EUR", "USD", "GBP"]},
    "card_last4": {"type": "string", "pattern": "^[0-9]{4}$"},
    "paid_at": {"type": "timestamp", "required": True},
})


def test_rules_come_in_the_order_they_are_checked_whatever_the_entry_says():
    assert [r.key for r in SPEC.rules("amount")] == ["required", "min", "max"]
    assert [r.key for r in SPEC.rules("payment_id")] == ["required", "max_length"]  # a key column is required
    assert KEYS[0] == "required" and not Rule("required").on_typed_value and Rule("min", 0).on_typed_value


def test_the_reasons_are_the_ones_the_pipelines_page_documents():
    docs = (Path(__file__).parents[2] / "docs" / "pipelines.md").read_text()
    shown = {("paid_at", "required"), ("amount", "min"), ("amount", "max"), ("currency", "in"),
             ("card_last4", "pattern"), ("payment_id", "max_length")}
    for column, key in shown:
        rule, = (r for r in SPEC.rules(column) if r.key == key)
        assert re.search(rf"`{re.escape(rule.reason(column))}(: [^`]+)?`", docs), rule.reason(column)
    assert {key for _, key in shown} == set(KEYS)


def test_the_entry_form_round_trips_and_reads_as_a_user_writes_it():
    rules = SPEC.rules("currency")
    assert rules_of(as_mapping(rules)) == rules and as_mapping(rules) == {"in": ["EUR", "USD", "GBP"]}
    assert [str(r) for r in SPEC.rules("amount")] == ["required", "min 0", "max 1000000"]
    assert str(Rule("in", ["a", "b"])) == "in [a, b]" and Rule("in", ["a"]).broken_when is BrokenWhen.NOT_IN
    assert rules_of({"required": False, "min": None, "max": Decimal("5")}) == (Rule("max", Decimal("5")),)
    with pytest.raises(ValueError, match="'minimum' is not a rule"):
        Rule("minimum", 1)


def test_the_read_refuses_a_rule_it_does_not_check_instead_of_dropping_it():
    with pytest.raises(ValueError, match="does not check pattern"):
        ValueColumn("code", "code", "string", rules_of({"pattern": "^[A-Z]+$"}))

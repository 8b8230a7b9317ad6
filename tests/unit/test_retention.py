"""The retention settings: ages per kind, read and refused as a user writes them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamfill.errors import OptionError
from streamfill.offsets_db.retention import RULES, Removed
from streamfill.retention_ages import DEFAULT, Retention, parse_age, written
from streamfill.settings import get_settings
from streamfill.spark_jobs.maintenance import Pruned

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw, age", [("90d", timedelta(days=90)), ("12h", timedelta(hours=12)),
                                      ("30m", timedelta(minutes=30)), ("14", timedelta(days=14)),
                                      ("forever", None), (" Forever ", None)])
def test_an_age_is_a_duration_a_bare_number_of_days_or_forever(raw, age):
    assert parse_age(raw) == age
    assert age is None or parse_age(written(age)) == age


@pytest.mark.parametrize("raw", ["2w", "0", "-1d", "", "soon"])
def test_anything_else_is_refused_naming_the_forms(raw):
    with pytest.raises(ValueError, match="is not an age: write a positive duration such as 90d"):
        parse_age(raw)


def test_each_kind_has_its_setting_and_a_bad_one_names_the_variable(monkeypatch):
    monkeypatch.setenv("STREAMFILL_RETAIN_DEAD_LETTERS", "14d")
    monkeypatch.setenv("STREAMFILL_RETAIN_STAGES", "forever")
    got = get_settings().retention()
    assert got == Retention(**{**{k: getattr(DEFAULT, k) for k in Retention.kinds()},
                               "dead_letters": timedelta(days=14), "stages": None})
    assert "dead_letters 14d" in got.describe() and "stages forever" in got.describe()
    monkeypatch.setenv("STREAMFILL_RETAIN_HISTORY", "2w")
    with pytest.raises(OptionError, match=r"STREAMFILL_RETAIN_HISTORY='2w': is not an age.*Fix "
                                          r"STREAMFILL_RETAIN_HISTORY"):
        get_settings()


def test_every_rule_is_of_a_kind_with_an_age_and_the_report_says_whether_anything_went():
    assert {rule.kind for rule in RULES} <= set(Retention.kinds())
    dry = Pruned(False, DEFAULT, (Removed("dead_letters", "dead letters", 1200),)).lines()
    assert dry[0].startswith("a dry run, nothing removed; --apply removes") and "1,200  dead letters" in dry[1]
    assert Pruned(True, DEFAULT, ()).lines() == [f"removed what is older than its age ({DEFAULT.describe()}):",
                                                 "  nothing"]

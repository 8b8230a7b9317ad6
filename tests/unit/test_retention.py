"""The retention settings: ages per kind, read and refused as a user writes them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamfill.errors import OptionError
from streamfill.offsets_db.deleted_keys import Recorded, left_kafka
from streamfill.offsets_db.retention import RULES, Removed
from streamfill.partitions import TopicPartition
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


def test_a_deleted_key_goes_only_once_kafka_no_longer_holds_the_record_that_made_it():
    """Below the partition's log-start offset, or not among the records still there (compacted away): nothing
    older of the key can be replayed from that partition. Held, or of a topic Kafka does not show: kept."""
    tp0, tp1, dropped = TopicPartition("customers", 0), TopicPartition("customers", 1), TopicPartition("old", 0)

    def delete(tp: TopicPartition, offset: int, key: str) -> Recorded:
        return Recorded("public.customers", f'["{key}"]', tp, offset)

    found = [delete(tp0, 5, "below the log start"), delete(tp0, 40, "compacted away"), delete(tp0, 41, "held"),
             delete(tp1, 7, "held too"), delete(tp1, 2, "also compacted away"), delete(dropped, 3, "topic not shown")]
    gone = left_kafka(found, partitions={tp0, tp1}, log_starts={tp0: 10, tp1: 0}, held={(tp0, 41), (tp1, 7)})
    assert [r.key for r in gone] == ['["below the log start"]', '["compacted away"]', '["also compacted away"]']
    assert left_kafka(found, partitions={tp0, tp1}, log_starts={tp0: 0, tp1: 0},
                      held={(r.at, r.offset) for r in found}) == [], "all held: all kept"


def test_deleted_keys_have_an_age_of_their_own_and_forever_keeps_them(monkeypatch):
    assert DEFAULT.deleted_keys == timedelta(days=7) and "deleted_keys 7d" in DEFAULT.describe()
    monkeypatch.setenv("STREAMFILL_RETAIN_DELETED_KEYS", "forever")
    assert get_settings().retention().deleted_keys is None

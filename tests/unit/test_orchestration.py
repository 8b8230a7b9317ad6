"""Window and replay job names, and range merging for reconciliation (the jobs file: test_pipelines.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from offsets_db.reconcile import merge
from orchestration.tasks import replay_job, window_job

pytestmark = pytest.mark.unit


def test_window_and_replay_job_names_are_valid_stable_and_distinct():
    start = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    assert window_job("orders", start) == "orders.interval.20261122T1000"
    a = replay_job("orders", "earliest", "latest", "t")
    assert a == replay_job("orders", "earliest", "latest", "t")
    assert a != replay_job("orders", "earliest", "latest", "u") != replay_job("orders", "earliest", "2026", "t")
    from streamfill.names import validate_job_name

    assert validate_job_name(a) == a


def test_consumed_ranges_merge_per_partition():
    assert merge([("t", 0, 10, 20), ("t", 0, 0, 10), ("t", 1, 5, 6), ("t", 0, 15, 30), ("t", 0, 40, 40)]) == [
        ("t", 0, 0, 30), ("t", 1, 5, 6)]


def test_a_run_conf_key_that_is_not_a_form_field_is_refused_with_the_nearest_field():
    from orchestration.dag_ids import REPLAY
    from orchestration.tasks import refuse_unknown_conf
    from streamfill.errors import OptionError

    fields = {"job": "orders", "from": "earliest", "to": "latest", "table": None}
    refuse_unknown_conf(REPLAY, {"job": "orders", "from": "{}"}, fields)  # known keys pass
    with pytest.raises(OptionError, match=r"form='\{\"0\": 5\}': is not a field of streamfill_replay's form "
                                          r"\(its fields: job, from, to, table\)\. did you mean 'from'\?"):
        refuse_unknown_conf(REPLAY, {"job": "orders", "form": '{"0": 5}'}, fields)
    with pytest.raises(OptionError, match=r"option zzz=1: .* Trigger the run again with the form's fields only"):
        refuse_unknown_conf(REPLAY, {"zzz": 1}, fields)


def test_a_backfill_check_fails_in_the_replay_forms_words():
    from orchestration.tasks import as_form_error
    from streamfill.errors import OptionError

    cli = OptionError("--from", '{"0": 9}', "is after --to '{\"0\": 5}' on t-0", "choose a --to at or after --from; "
                      "see --chunk-size and --topic")
    form = as_form_error(cli)
    assert (form.option, form.value) == ("from", '{"0": 9}')
    assert str(form) == ("option from='{\"0\": 9}': is after to '{\"0\": 5}' on t-0. choose a to at or after from; "
                         "see chunk_size and --topic")

"""Window and replay job names, and range merging for reconciliation (the jobs file: test_pipelines.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from streamfill.names import window_job
from streamfill.offsets_db.reconcile import merge
from streamfill.orchestration.job_names import replay_job

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
    from streamfill.dag_ids import REPLAY
    from streamfill.errors import OptionError
    from streamfill.orchestration.form_checks import refuse_unknown_conf

    fields = {"job": "orders", "from": "earliest", "to": "latest", "table": None}
    refuse_unknown_conf(REPLAY, {"job": "orders", "from": "{}"}, fields)  # known keys pass
    with pytest.raises(OptionError, match=r"form='\{\"0\": 5\}': is not a field of streamfill_replay's form "
                                          r"\(its fields: job, from, to, table\)\. did you mean 'from'\?"):
        refuse_unknown_conf(REPLAY, {"job": "orders", "form": '{"0": 5}'}, fields)
    with pytest.raises(OptionError, match=r"option zzz=1: .* Trigger the run again with the form's fields only"):
        refuse_unknown_conf(REPLAY, {"zzz": 1}, fields)


def test_a_backfill_check_fails_in_the_replay_forms_words():
    from streamfill.errors import OptionError
    from streamfill.orchestration.form_checks import as_form_error

    cli = OptionError("--from", '{"0": 9}', "is after --to '{\"0\": 5}' on t-0", "choose a --to at or after --from; "
                      "see --chunk-size and --topic")
    form = as_form_error(cli)
    assert (form.option, form.value) == ("from", '{"0": 9}')
    assert str(form) == ("option from='{\"0\": 9}': is after to '{\"0\": 5}' on t-0. choose a to at or after from; "
                         "see chunk_size and --topic")


def test_a_replay_goes_only_where_its_user_may_use_the_entrys_dags_and_a_run_no_user_triggered_as_before():
    from streamfill.orchestration.replay_access import ReplayRefused, Trigger, check, own_tables, refusal
    from streamfill.spark_jobs.pipelines import PipelineSpec

    orders = PipelineSpec(name="orders", topic="orders", table="orders", columns={"id": {"type": "string"}})
    stream = "streamfill_stream__orders"
    assert own_tables(orders) == ["orders", "orders_intervals", "orders_replay"]

    def run(user, how="rest_api", known=True, may=(), every=False, note=""):
        return Trigger("streamfill_replay", "manual__1", user, how, known, frozenset(may), every, note)

    # a team that may trigger the entry's stream DAG, into each of its own tables
    for table in own_tables(orders):
        assert refusal(run("alice", may=[stream]), orders, table) is None
    # another team: neither the entry nor its table, in the user's words and with what to do
    with pytest.raises(ReplayRefused, match=r"user 'bob' may not trigger streamfill_stream__orders, the DAG that "
                                            r"writes entry 'orders', so may not replay that entry \(into table "
                                            r"'orders'\) .* ask whoever manages Airflow's roles"):
        check(run("bob", may=["streamfill_stream__payments"]), orders, "orders")
    # the entry's team, but another table: another team's, or a new one
    for table in ("payments", "public.orders", "scratch"):
        assert "into its own tables only (orders, orders_intervals, orders_replay), not into table " \
               f"{table!r}" in refusal(run("alice", may=[stream]), orders, table)
    # who may trigger every DAG may name any table, as from a terminal
    assert refusal(run("admin", may=[stream], every=True), orders, "scratch") is None
    # a user the auth manager cannot answer for is refused, the reason named
    assert "cannot answer for that user (it has no active user 'ghost')" in refusal(
        run("ghost", known=False, note="it has no active user 'ghost'"), orders, "orders")
    # no user (a schedule, an operator of such a run), Airflow's CLI or `airflow dags test`: as before
    for how, user in ((None, None), ("operator", None), ("cli", "root"), ("test", "dag_test")):
        assert refusal(run(user, how, known=False), orders, "scratch") is None
    # a DAG of a user's that triggers the form carries that user: asked like the UI's
    assert refusal(run("bob", "operator"), orders, "orders") is not None

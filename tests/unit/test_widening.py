"""Schema changes online, their pure parts: which column type changes are safe widenings and which of them rewrite
the table (`connectors.postgres.widening`), what a running stream makes of its entry read again
(`spark_jobs.entry_changes`), and when it reads it (`spark_jobs.entry_watch`)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from streamfill.connectors.postgres.column_types import normal_type
from streamfill.connectors.postgres.widening import Widening, widening
from streamfill.errors import OptionError, RegistryError
from streamfill.spark_jobs import entry_watch
from streamfill.spark_jobs.entry_changes import compare
from streamfill.spark_jobs.entry_watch import ENTRY_EVERY_S, REGISTRY_EVERY_S, EntryWatch
from streamfill.spark_jobs.pipelines import PipelineSpec

pytestmark = pytest.mark.unit


# 1. the column's type

@pytest.mark.parametrize("have, want, rewrite", [
    ("integer", "bigint", True), ("smallint", "integer", True), ("smallint", "bigint", True),
    ("numeric(10,2)", "numeric(14,2)", False),  # more digits at the same scale: the catalog only
    ("numeric(10,2)", "numeric(12,4)", True),  # another scale: every value is written again
    ("numeric(10,2)", "numeric(11,3)", True), ("numeric(10,2)", "numeric", False),
    ("character varying(20)", "text", False), ("varchar(20)", "text", False),
    ("character varying(20)", "character varying(40)", False), ("character varying(20)", "varchar", False),
])
def test_a_safe_widening_is_applied_and_says_whether_it_rewrites_the_table(have, want, rewrite):
    assert widening(have, want) == Widening(have, want, rewrite)


@pytest.mark.parametrize("have, want", [
    ("bigint", "integer"), ("integer", "smallint"), ("integer", "integer"),  # narrower, or the same
    ("numeric(10,2)", "numeric(12,1)"),  # fewer digits after the point: values are rounded
    ("numeric(10,2)", "numeric(11,4)"),  # fewer digits before the point: large values no longer fit
    ("numeric(10,2)", "numeric(9,2)"), ("numeric", "numeric(38,10)"),
    ("character varying(40)", "character varying(20)"), ("text", "character varying(20)"),
    ("integer", "numeric(12,2)"), ("integer", "double precision"), ("real", "double precision"),
    ("text", "integer"), ("character(5)", "text"), ("timestamp", "timestamptz"), ("jsonb", "text"),
])
def test_anything_else_is_no_widening(have, want):
    assert widening(have, want) is None


def test_the_types_postgres_names_compare_in_their_normal_form():
    assert widening(normal_type("numeric(10, 2)"), normal_type("numeric(14,2)")) == Widening(
        "numeric(10,2)", "numeric(14,2)", False)


# 2. the entry read again

def entry(columns: dict, **fields) -> PipelineSpec:
    return PipelineSpec(name="orders", **{"topic": "orders", "table": "orders_t", "columns": columns, **fields})


BASE = {"id": {"type": "string", "required": True}, "n": {"type": "int"}, "amount": {"type": "decimal(10,2)"}}


def test_a_new_optional_column_and_safe_widenings_are_followed_and_the_rest_of_the_entry_kept():
    running = entry(BASE, trigger="5s")
    fresh = entry({**BASE, "n": {"type": "bigint"}, "amount": {"type": "decimal(14,2)"}, "note": {"type": "string"}},
                  trigger="1s", quality=[{"expect_column_values_to_not_be_null": {"column": "id"}}])
    changes = compare(running, fresh, "orders_t")
    assert changes.acted_on and not changes.refused
    assert changes.followed == ("column n widened from int to bigint",
                                "column amount widened from decimal(10,2) to decimal(14,2)", "column note string added")
    assert list(changes.spec.columns) == ["id", "n", "amount", "note"]
    assert changes.spec.columns["n"].column_type.postgres == "bigint"
    assert changes.spec.trigger == "5s" and changes.spec.quality == [], "what it does not follow stays the launch's"
    assert changes.ignored == ("quality", "trigger")


def test_a_changed_rule_is_followed_and_a_column_order_alone_is_no_change():
    running = entry(BASE)
    assert not compare(running, entry(dict(reversed(BASE.items()))), "orders_t").acted_on
    changes = compare(running, entry({**BASE, "n": {"type": "int", "min": 0}, "id": {"type": "string"}}), "orders_t")
    assert changes.followed == ("column id's required changed", "column n's min changed")


def test_fields_a_running_stream_does_not_follow_are_ignored_not_acted_on():
    changes = compare(entry(BASE), entry(BASE, trigger="1s", schedule="5 * * * *"), "orders_t")
    assert not changes.acted_on and changes.ignored == ("trigger", "schedule")


@pytest.mark.parametrize("columns, fields, option, fix", [
    ({**BASE, "n": {"type": "string"}}, {}, "columns.n.type",
     'ALTER TABLE "orders_t" ALTER COLUMN "n" TYPE text USING "n"::text'),
    ({**BASE, "amount": {"type": "decimal(12,1)"}}, {}, "columns.amount.type",
     'ALTER TABLE "orders_t" ALTER COLUMN "amount" TYPE numeric(12,1)'),
    ({**BASE, "n": {"type": "bigint"}}, {}, None, None),  # the control: followed
    ({**BASE, "amount": {"type": "decimal(8,2)"}}, {}, "columns.amount.type",
     "Restart the stream to apply it: the table's column stays numeric(10,2), which holds every decimal(8,2)"),
    ({**BASE, "n": {"type": "int", "required": True}}, {}, "columns.n.required", "Restart the stream to apply it"),
    ({**BASE, "note": {"type": "string", "required": True}}, {}, "columns.note.required",
     "Restart the stream to apply it (the launch adds the column"),
    ({k: v for k, v in BASE.items() if k != "n"}, {}, "columns.n", "the table keeps the column"),
    (BASE, {"key": ["id"]}, "key", "Restart the stream to apply it"),
    (BASE, {"topic": "orders-v2"}, "topic", "Restart the stream to apply it"),
    (BASE, {"mode": "replace", "key": ["id"]}, "key", "Restart the stream to apply it"),
    (BASE, {"derived": {"big": "n > 10"}}, "derived", "Restart the stream to apply it"),
])
def test_any_other_change_is_refused_naming_the_field_the_value_and_what_to_do(columns, fields, option, fix):
    changes = compare(entry(BASE), entry(columns, **fields), "orders_t")
    if option is None:
        assert changes.followed and not changes.refused
        return
    assert changes.refused and not changes.followed and changes.spec == entry(BASE), "nothing of it is followed"
    error = changes.error()
    assert isinstance(error, OptionError) and error.option == option
    assert "entry 'orders' while its stream ran" in str(error) and fix in str(error)


def test_a_key_columns_field_changed_is_refused_like_any_change_of_the_key_and_another_columns_followed():
    """Rows keyed from one field until a batch, from another after it, would be one job's rows keyed two ways."""
    running = entry(BASE, key=["id"], mode="replace")
    changes = compare(running, entry({**BASE, "id": {**BASE["id"], "field": "order.id"}}, key=["id"],
                                     mode="replace"), "orders_t")
    assert changes.refused and not changes.followed and changes.spec == running, "nothing of it is followed"
    error = changes.error()
    assert isinstance(error, OptionError) and error.option == "columns.id.field" and error.value == "order.id"
    assert "changed from None in entry 'orders' while its stream ran" in str(error)
    assert "id is part of the key" in str(error) and "Restart the stream to apply it" in str(error)
    assert not compare(running, entry({**BASE, "id": {**BASE["id"], "field": "id"}}, key=["id"], mode="replace"),
                       "orders_t").refused, "naming the column's own field is no change of the key"
    followed = compare(running, entry({**BASE, "n": {"type": "int", "field": "count"}}, key=["id"], mode="replace"),
                       "orders_t")
    assert followed.followed == ("column n's field changed",) and not followed.refused


def test_a_refusal_names_every_change_it_refused_and_follows_none_beside_them():
    changes = compare(entry(BASE), entry({**BASE, "note": {"type": "string"}}, key=["id"], mode="replace"),
                      "orders_t")
    assert not changes.followed and str(changes.error()).startswith("option key=['id']: changed from ")
    assert "(also refused: mode)" in str(changes.error())


def test_registry_columns_widened_by_a_newer_schema_are_followed_with_that_schema_as_reader():
    registry_entry = PipelineSpec(name="clicks", topic="clicks", table="clicks", format="avro",
                                  schema_registry={"subject": "clicks-value"})

    def version(fields: list) -> PipelineSpec:
        schema = {"type": "record", "name": "Click", "fields": fields}
        from streamfill.spark_jobs.pipelines.registry import columns_of

        return registry_entry.with_columns(columns_of(schema), schema)

    v1 = version([{"name": "url", "type": "string"}, {"name": "n", "type": "int"}])
    v2 = version([{"name": "url", "type": "string"}, {"name": "n", "type": "long"},
                  {"name": "agent", "type": ["null", "string"], "default": None}])
    changes = compare(v1, v2, "clicks")
    assert changes.followed == ("column n widened from int to bigint", "column agent string added")
    assert changes.spec.registry_reader_schema == v2.registry_reader_schema
    v3 = version([{"name": "url", "type": "string"}, {"name": "n", "type": "long"},
                   {"name": "agent", "type": "string"}])  # required now: no null, no default
    assert compare(v2, v3, "clicks").error().option == "columns.agent.required"


# 3. when the entry is read

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def jobs_file(path, columns: dict, **fields) -> None:
    path.write_text(yaml.safe_dump({"jobs": {"orders": {"topic": "orders", "table": "orders_t", "columns": columns,
                                                        **fields}}}))


def watching(tmp_path, monkeypatch, said: list, clock: Clock) -> EntryWatch:
    jobs = tmp_path / "jobs.yaml"
    jobs_file(jobs, BASE)
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    launched = entry_watch.entry_of("orders", None)
    return EntryWatch("orders", None, "orders_t", launched, launched, said.append, clock)


def test_the_jobs_file_is_read_every_few_seconds_and_what_is_left_for_the_next_launch_said_once(
        tmp_path, monkeypatch):
    said, clock = [], Clock()
    watch = watching(tmp_path, monkeypatch, said, clock)
    jobs_file(tmp_path / "jobs.yaml", {**BASE, "note": {"type": "string"}}, trigger="1s")
    assert watch.check() is None, "not due yet"
    clock.now += ENTRY_EVERY_S
    changes = watch.check()
    assert changes.followed == ("column note string added",)
    assert said == ["stream orders: trigger changed in its entry; a running stream keeps its own, and the next "
                    "launch applies them"]
    watch.adopt(changes.spec)
    clock.now += ENTRY_EVERY_S
    assert watch.check() is None and len(said) == 1, "followed once, and the ignored trigger said once"


def test_an_entry_that_cannot_be_read_now_leaves_the_stream_as_it_runs_said_once(tmp_path, monkeypatch):
    said, clock = [], Clock()
    watch = watching(tmp_path, monkeypatch, said, clock)
    (tmp_path / "jobs.yaml").write_text(textwrap.dedent("""\
        jobs:
          orders: {topic: orders, table: orders_t, columns: {n: {type: int
        """))  # saved half-way
    for _ in range(3):
        clock.now += ENTRY_EVERY_S
        assert watch.check() is None
    assert len(said) == 1 and said[0].startswith("stream orders: its entry cannot be read now (cannot read the "
                                                 "jobs file") and said[0].endswith("it goes on with the entry it runs")


def test_a_registry_subject_is_asked_less_often_than_the_file_is_read(tmp_path, monkeypatch):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": {"clicks": {"topic": "clicks", "table": "clicks", "format": "avro",
                                                        "schema_registry": {"subject": "clicks-value"}}}}))
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    asked, versions = [], [[{"name": "n", "type": "int"}]]

    def resolved(spec):
        asked.append(spec.name)
        if versions[-1] is None:
            raise RegistryError("the schema registry does not answer")
        schema = {"type": "record", "name": "Click", "fields": versions[-1]}
        from streamfill.spark_jobs.pipelines.registry import columns_of

        return spec.with_columns(columns_of(schema), schema)

    monkeypatch.setattr(entry_watch.registry, "resolved", resolved)
    raw = entry_watch.entry_of("clicks", None)
    said, clock = [], Clock()
    watch = EntryWatch("clicks", None, "clicks", raw, resolved(raw), said.append, clock)
    versions.append([{"name": "n", "type": "long"}])
    for _ in range(int(REGISTRY_EVERY_S // ENTRY_EVERY_S) - 1):
        clock.now += ENTRY_EVERY_S
        assert watch.check() is None
    assert asked == ["clicks"], "only the launch's own look-up so far"
    clock.now += ENTRY_EVERY_S
    assert watch.check().followed == ("column n widened from int to bigint",)
    versions.append(None)
    clock.now += REGISTRY_EVERY_S
    assert watch.check() is None and said == [
        "stream clicks: its entry cannot be read now (the schema registry does not answer); it goes on with the "
        "entry it runs"]


def test_each_field_a_running_stream_leaves_for_the_next_launch_is_a_field_of_the_entry():
    """Every other field is refused while the stream runs: one added to entries later as well, until it is named
    here as safe to leave for the next launch."""
    from streamfill.spark_jobs.entry_changes import IGNORED_FIELDS

    assert set(IGNORED_FIELDS) <= set(PipelineSpec.model_fields)

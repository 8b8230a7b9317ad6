"""streamfill's OpenLineage events: each kind is valid by the specification's schemas, the settings turn lineage on
and off as the client's own configuration does (but off, not console, when none is set), the parent of an Airflow
task is read and computed as Airflow's provider does, and `launch_run` delivers through the real client."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone

import pytest
from openlineage.client.serde import Serde

from streamfill.datasets import KafkaTopic, PgTable
from streamfill.errors import OptionError
from streamfill.spark_jobs import lineage
from streamfill.spark_jobs.lineage_events import (
    Parent,
    airflow_dag_run_id,
    airflow_task_run_id,
    assertions_facet,
    input_dataset,
    output_dataset,
    quality_job,
    run_event,
    schema_facet,
)
from streamfill.spark_jobs.pipelines.spec import PipelineSpec
from tests import lineage_schema
from tests.lineage_receiver import receiver

pytestmark = pytest.mark.unit

SPEC = PipelineSpec(name="orders", topic="orders", table="sales.orders", key=["order_id"],
                    columns={"order_id": {"type": "string", "required": True}, "amount": {"type": "decimal(12,2)"},
                             "lines": {"type": "array<struct<sku:string,n:int>>"}},
                    derived={"amount_cents": "amount * 100"})
TABLE = PgTable.of("postgresql://streamfill@db:5433/app", SPEC.table)
TOPIC = KafkaTopic.of("SASL_SSL://broker-1:9094,broker-2:9094", "orders", environ={})
TASK_RUN, DAG_RUN = "019ca8d7-2d00-7954-86c9-a0f993738c56", "019ca8d7-2d00-7292-a83a-d53fe9ad7b65"
PARENT_ENV = {"OPENLINEAGE_PARENT_ID": f"default/streamfill_interval__orders.backfill_window/{TASK_RUN}",
              "OPENLINEAGE_ROOT_PARENT_ID": f"default/streamfill_interval__orders/{DAG_RUN}"}
RUN = "01900000-0000-7000-8000-000000000001"


def as_json(event) -> dict:
    return json.loads(Serde.to_json(event))


def test_every_event_kind_is_valid_by_the_specification():
    parent = Parent.parse(PARENT_ENV)
    out = output_dataset(TABLE, schema=schema_facet(SPEC))
    common = dict(namespace="streamfill", parent=parent)
    events = {
        "start": run_event("START", "orders", RUN, [TOPIC], [out], processing="STREAMING", **common),
        "running": run_event("RUNNING", "orders", RUN, [TOPIC], [out], output_rows=42, **common),
        "complete": run_event("COMPLETE", "orders", RUN, [TOPIC], [out], output_rows=1000, **common),
        "fail": run_event("FAIL", "orders", RUN, [TOPIC], [out], error="broker gone\nsecond line", **common),
        "abort": run_event("ABORT", "orders", RUN, [TOPIC], [out], namespace="streamfill"),
        "quality": run_event("COMPLETE", quality_job("orders"), RUN, [input_dataset(TABLE, assertions=assertions_facet(
            [("expect_column_values_to_not_be_null", "offset", True),
             ("unexpected_rows_expectation", None, False, "(topic, partition, offset) is unique")]))], [], **common),
    }
    found = {kind: lineage_schema.problems(as_json(e)) for kind, e in events.items()}
    assert found == {kind: [] for kind in events}

    start, running, fail, quality = (as_json(events[k]) for k in ("start", "running", "fail", "quality"))
    assert (start["inputs"][0]["namespace"], start["inputs"][0]["name"]) == ("kafka://broker-1:9094", "orders")
    assert (start["outputs"][0]["namespace"], start["outputs"][0]["name"]) == ("postgres://db:5433", "app.sales.orders")
    parent_facet = start["run"]["facets"]["parent"]
    assert (parent_facet["job"]["name"], parent_facet["root"]["run"]["runId"]) == (
        "streamfill_interval__orders.backfill_window", DAG_RUN)
    assert start["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    assert running["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 42
    assert fail["run"]["facets"]["errorMessage"]["message"] == "broker gone\nsecond line"
    assert quality["job"]["name"] == "orders.quality"
    checked = quality["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a.get("column"), a["success"]) for a in checked] == [
        ("expect_column_values_to_not_be_null", "offset", True), ("unexpected_rows_expectation", None, False)]

    # the checker itself: a facet in the wrong place, under the wrong key, or of a version not vendored
    wrong = as_json(events["quality"])
    facet = wrong["inputs"][0].pop("inputFacets")["dataQualityAssertions"]
    wrong["inputs"][0]["facets"] = {"quality": facet}
    wrong["run"]["facets"]["errorMessage"] = {**start["run"]["facets"]["processing_engine"],
                                              "_schemaURL": "https://openlineage.io/spec/facets/9-9-9/X.json#/$defs/X"}
    assert [p.split(":")[0] for p in lineage_schema.problems(wrong)] == [
        "run.errorMessage", "inputs[0].quality", "inputs[0].quality"]


def test_the_schema_facet_has_the_types_the_sink_creates():
    from pyspark.sql import types as T

    from streamfill.connectors.spark.pg_types import pg_type
    from streamfill.connectors.spark.source import SCHEMA

    fields = {f["name"]: f.get("type") for f in as_json(schema_facet(SPEC))["fields"]}
    assert fields == {"topic": "text", "partition": "integer", "offset": "bigint", "kafka_timestamp": "timestamptz",
                      "order_id": "text", "amount": "numeric(12,2)", "lines": "jsonb", "amount_cents": None}
    # the coordinates: the types the sink gives Spark's Kafka columns (connectors/spark/source.py SCHEMA)
    spark = {t().simpleString(): t() for t in (T.StringType, T.IntegerType, T.LongType, T.TimestampType)}
    spark["long"] = T.LongType()
    source = dict(col.split() for col in SCHEMA.split(", "))
    sink = {name: pg_type(name, spark[source["timestamp" if name == "kafka_timestamp" else name]])
            for name in ("topic", "partition", "offset", "kafka_timestamp")}
    assert sink == {k: fields[k] for k in sink}
    typed = as_json(schema_facet(SPEC, {"amount_cents": "numeric(14,2)"}))["fields"]
    assert (typed[-1]["name"], typed[-1]["type"]) == ("amount_cents", "numeric(14,2)")


def test_lineage_is_on_only_with_an_openlineage_setting(tmp_path):
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    (home / ".openlineage").mkdir(parents=True)
    cwd.mkdir()

    def setting(environ, files=()):
        for f in cwd / "openlineage.yml", home / ".openlineage" / "openlineage.yml", tmp_path / "conf.yml":
            f.unlink(missing_ok=True)
        for path, text in files:
            path.write_text(text)
        return lineage.configured(environ, cwd, home)

    url = {"OPENLINEAGE_URL": "http://u:secret@marquez:5000"}
    http = "transport: {type: http, url: http://marquez:5000}\n"
    assert setting({}) is None
    assert setting(url) == "http transport to http://marquez:5000 (OPENLINEAGE_URL)"
    assert setting({**url, "OPENLINEAGE_DISABLED": "TRUE"}) is None
    marquez = "http transport to http://marquez:5000"
    assert setting({}, [(cwd / "openlineage.yml", http)]) == f"{marquez} ({cwd}/openlineage.yml)"
    assert setting({}, [(home / ".openlineage/openlineage.yml", "transport: {type: console}\n")]) == \
        f"console transport ({home}/.openlineage/openlineage.yml)"
    assert setting({"OPENLINEAGE_CONFIG": str(tmp_path / "conf.yml")}, [
        (tmp_path / "conf.yml", http), (cwd / "openlineage.yml", "transport: {type: console}\n")]) == \
        f"{marquez} ({tmp_path}/conf.yml)"
    assert setting({}, [(cwd / "openlineage.yml", "filters: []\n")]) is None  # no transport: the client's console
    assert setting({"OPENLINEAGE__TRANSPORT__TYPE": "kafka"}) == "kafka transport (OPENLINEAGE__TRANSPORT__* settings)"
    assert setting({"OPENLINEAGE__TRANSPORT__TYPE": "noop"}) is None
    # what the client copies OPENLINEAGE_URL into, left alone, is no transport
    assert setting({"OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__URL": "http://marquez:5000"}) is None
    with pytest.raises(OptionError, match="OPENLINEAGE_CONFIG"):
        setting({"OPENLINEAGE_CONFIG": str(tmp_path / "missing.yml")})


def test_the_parent_comes_from_the_settings_airflow_gives():
    parent = Parent.parse(PARENT_ENV)
    assert parent == Parent("default", "streamfill_interval__orders.backfill_window", TASK_RUN,
                            "default", "streamfill_interval__orders", DAG_RUN)
    assert Parent.parse(parent.environ()) == parent
    alone = Parent.parse({"OPENLINEAGE_PARENT_ID": PARENT_ENV["OPENLINEAGE_PARENT_ID"]})
    assert (alone.root_namespace, alone.root_name, alone.root_run_id) == (alone.namespace, alone.job_name, TASK_RUN)
    assert Parent.parse({}) is None
    for bad in ("default/only_two", f"default/dag.task/{TASK_RUN[:-1]}x", f"/dag.task/{TASK_RUN}"):
        with pytest.raises(OptionError, match="OPENLINEAGE_PARENT_ID"):
            Parent.parse({"OPENLINEAGE_PARENT_ID": bad})


def test_airflow_run_ids_are_the_providers():
    # apache-airflow-providers-openlineage 2.20.3's own build_task_instance_ol_run_id / build_dag_run_ol_run_id,
    # imported from its wheel and called with OPENLINEAGE_NAMESPACE=default and these arguments, gave these ids
    logical = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
    assert airflow_task_run_id("default", "streamfill_interval__orders", "backfill_window", 1, -1, logical) == TASK_RUN
    assert airflow_dag_run_id("default", "streamfill_interval__orders", 0, logical) == DAG_RUN
    with pytest.raises(ValueError, match="time zone"):
        airflow_task_run_id("default", "d", "t", 1, -1, datetime(2026, 3, 1))


@pytest.fixture
def environ(tmp_path, monkeypatch):
    """No OpenLineage setting, no config file where the client looks; os.environ as it was afterwards (the client
    adds variables of its own to it)."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        del os.environ[name]
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def test_launch_run_delivers_its_events_and_nothing_without_a_setting(environ, capfd, caplog):
    out = output_dataset(TABLE, schema=schema_facet(SPEC))
    parent = Parent.parse(PARENT_ENV)
    with receiver() as got:
        environ.update(got.env)
        with lineage.launch_run("orders", [TOPIC], [out], parent=parent) as ok:
            ok.output_rows = 7
        with pytest.raises(RuntimeError, match="disk full"):
            with lineage.launch_run("orders", [TOPIC], [out], parent=parent) as failed:
                raise RuntimeError("disk full\n  while writing\n")
        got.wait_for(lambda events: len(events) == 4, timeout=10)
        assert got.invalid == []
        assert [e["eventType"] for e in got.of_run(ok.run_id)] == ["START", "COMPLETE"]
        assert [e["eventType"] for e in got.of_run(failed.run_id)] == ["START", "FAIL"]
        complete, fail = got.of_run(ok.run_id)[1], got.of_run(failed.run_id)[1]
        assert complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 7
        assert complete["run"]["facets"]["parent"]["run"]["runId"] == TASK_RUN
        assert fail["run"]["facets"]["errorMessage"]["message"] == "RuntimeError: disk full\n  while writing"

        for name in [n for n in environ if n.startswith("OPENLINEAGE")]:
            del environ[name]
        capfd.readouterr()
        caplog.set_level(logging.DEBUG, logger="openlineage")
        caplog.clear()  # what the launches with a setting logged (at INFO where an earlier test set that level)
        with lineage.launch_run("orders", [TOPIC], [out], parent=None):
            pass
        assert lineage.emitter() is None
        assert len(got.events) == 4
        assert capfd.readouterr() == ("", "")
        assert [r for r in caplog.records if r.name.startswith("openlineage")] == []

"""The metrics' configuration and what the docs' dashboard and alert rules ask of them."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from streamfill import REPO_ROOT
from streamfill.errors import OptionError
from streamfill.spark_jobs.telemetry import EXPORTER_ENV, JOB_LABEL, PROMETHEUS_NAMES, exporters

pytestmark = pytest.mark.unit

DASHBOARD = REPO_ROOT / "docs" / "metrics" / "grafana-dashboard.json"
ALERTS = REPO_ROOT / "docs" / "metrics" / "prometheus-alerts.yaml"


@pytest.mark.parametrize("raw, names", [(None, []), ("", []), ("none", []), ("prometheus", ["prometheus"]),
                                        ("OTLP, console", ["otlp", "console"])])
def test_metrics_are_off_unless_opentelemetrys_variable_names_an_exporter(raw, names):
    assert exporters({} if raw is None else {EXPORTER_ENV: raw}) == names


def test_an_unknown_exporter_is_refused_naming_the_variable_and_the_choices():
    with pytest.raises(OptionError, match=r"OTEL_METRICS_EXPORTER='prometheus,statsd': names statsd.*use prometheus, "
                                          r"otlp, console, none"):
        exporters({EXPORTER_ENV: "prometheus,statsd"})


def _used(expressions: list[str]) -> set[str]:
    found = {m for e in expressions for m in re.findall(r"\bstreamfill_[a-z_]+", e)} - {JOB_LABEL}
    return {re.sub(r"_(bucket|count|sum)$", "", m) for m in found}


def test_the_dashboard_and_the_alert_rules_read_only_metrics_a_job_exports_by_its_job_label():
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    expressions = queries + [r["expr"] for r in rules]
    assert _used(expressions) <= set(PROMETHEUS_NAMES) and len(_used(queries)) >= 6
    assert all("by (streamfill_job" in e or "$job" in e for e in expressions)
    assert {r["alert"] for r in rules} >= {"StreamfillLagHigh", "StreamfillStale", "StreamfillDataLoss"}

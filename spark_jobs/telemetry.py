"""A job's metrics through OpenTelemetry (docs/operations.md#metrics), from OpenTelemetry's own environment
variables: off unless `OTEL_METRICS_EXPORTER` names an exporter (`prometheus`, `otlp`, `console`, several with
commas). The figures are offsets_db's, read by the driver after each micro-batch (the commit itself runs in a
Python worker), so what a scrape says is what SQL says."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from streamfill.errors import Fenced, JobBusy, OptionError

log = logging.getLogger("streamfill.telemetry")

EXPORTERS = ("prometheus", "otlp", "console", "none")
EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
PROMETHEUS_HOST_ENV, PROMETHEUS_PORT_ENV = "OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT"
PROMETHEUS_DEFAULTS = ("localhost", 9464)  # OpenTelemetry's defaults for the Prometheus exporter
METER = "streamfill"
# the job's attribute: not `job`, which Prometheus gives every scraped series (the scrape job's name)
JOB_LABEL = "streamfill_job"
COUNTER, HISTOGRAM, GAUGE = "counter", "histogram", "gauge"


@dataclass(frozen=True)
class Instrument:
    name: str
    kind: str
    unit: str
    description: str

    @property
    def prometheus_name(self) -> str:
        """As a Prometheus scrape shows it: dots as underscores, then the unit (seconds) and a counter's _total."""
        base = self.name.replace(".", "_") + ("_seconds" if self.unit == "s" else "")
        return base + ("_total" if self.kind == COUNTER else "")


# a job's instruments, by the JobMetrics attribute (or callback) that feeds each
INSTRUMENTS = {
    "rows": Instrument("streamfill.rows", COUNTER, "{row}", "rows committed into the job's table"),
    "dead_letters": Instrument("streamfill.dead_letters", COUNTER, "{record}", "records committed as dead letters"),
    "data_loss": Instrument("streamfill.data_loss_events", COUNTER, "{event}",
                            "data-loss events found while planning committed batches"),
    "commits": Instrument("streamfill.commits", COUNTER, "{commit}", "batches committed"),
    "commit_duration": Instrument("streamfill.commit.duration", HISTOGRAM, "s",
                                  "each commit's transaction up to marking its batch"),
    "fenced": Instrument("streamfill.fenced_launches", COUNTER, "{launch}",
                         "launches refused or fenced because another holds the job"),
    "_lag": Instrument("streamfill.lag", GAUGE, "{offset}",
                       "per partition, the log end at the last planning less where the job stands (consumer_lag)"),
    "_freshness": Instrument("streamfill.freshness", GAUGE, "s",
                             "the Kafka timestamp of the newest committed record, seconds since the epoch"),
}
# what the dashboard and the alert rules of docs/metrics may read
PROMETHEUS_NAMES = tuple(i.prometheus_name for i in INSTRUMENTS.values())


def exporters(env: Mapping[str, str] = os.environ) -> list[str]:
    """The exporters OTEL_METRICS_EXPORTER names; none when it is unset, empty or `none`."""
    raw = env.get(EXPORTER_ENV, "").strip()
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise OptionError(EXPORTER_ENV, raw, f"names {', '.join(unknown)}, not an exporter streamfill starts",
                          f"use {', '.join(EXPORTERS)} (several with commas), or unset it for no metrics")
    return [n for n in names if n != "none"]


def _readers(names: list[str], env: Mapping[str, str]) -> list:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    readers = []
    for name in names:
        if name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            host = env.get(PROMETHEUS_HOST_ENV, PROMETHEUS_DEFAULTS[0])
            raw_port = env.get(PROMETHEUS_PORT_ENV, str(PROMETHEUS_DEFAULTS[1]))
            if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
                raise OptionError(PROMETHEUS_PORT_ENV, raw_port, "is not a port", "give a TCP port, e.g. 9464")
            try:
                start_http_server(int(raw_port), addr=host)
            except OSError as exc:  # the job runs on; its metrics are what a taken port costs
                log.warning("metrics: no Prometheus endpoint on %s:%s (%s): another job on this host may have it. "
                            "Give each job its own %s, or export with otlp", host, raw_port, exc,
                            PROMETHEUS_PORT_ENV)
                continue
            readers.append(PrometheusMetricReader())
            log.info("metrics: Prometheus endpoint on http://%s:%s/metrics", host, raw_port)
        elif name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") \
                or "http/protobuf"
            if protocol == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))  # endpoint, headers: OTEL_* too
        else:
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    return readers


class JobMetrics:
    """The instruments of one launch of a job, fed from offsets_db: `observe` after each micro-batch adds what
    the job committed since; lag and freshness are read when the exporter collects."""

    def __init__(self, meter, url: str, job: str, kafka: Mapping[str, str] | None = None) -> None:
        from opentelemetry.metrics import Observation

        from streamfill.offsets_db import queries
        from streamfill.offsets_db.engine import make_engine

        self._observation, self._queries = Observation, queries
        self.job, self.kafka, self.attributes = job, dict(kafka or {}), {JOB_LABEL: job}
        self.engine = make_engine(url)
        for attribute, instrument in INSTRUMENTS.items():
            if instrument.kind == GAUGE:
                meter.create_observable_gauge(instrument.name, callbacks=[getattr(self, attribute)],
                                              unit=instrument.unit, description=instrument.description)
            else:
                create = meter.create_counter if instrument.kind == COUNTER else meter.create_histogram
                setattr(self, attribute, create(instrument.name, unit=instrument.unit,
                                                description=instrument.description))
        self._lock = threading.Lock()
        self._after = queries.newest_commit(self.engine, job)
        self._fresh: tuple[dict, float | None] = ({}, None)  # the positions last read, and what they said
        self._broker = None  # made at the first collection of freshness, then kept

    def observe(self) -> None:
        """Add what the job committed since the last look. A failure to read offsets_db is logged and tried again
        at the next look: metrics never stop a job."""
        try:
            self._observe()
        except Exception as exc:  # the job's own work goes on; the next look catches up
            log.warning("metrics of job %s: reading offsets_db failed, tried again after the next batch: %s",
                        self.job, exc)

    def _observe(self) -> None:
        with self._lock:
            for commit in self._queries.commits_since(self.engine, self.job, self._after):
                self.commits.add(1, self.attributes)
                self.rows.add(commit["rows"], self.attributes)
                self.dead_letters.add(commit["dead_letters"], self.attributes)
                self.data_loss.add(commit["data_loss"], self.attributes)
                if commit["commit_ms"] is not None:
                    self.commit_duration.record(commit["commit_ms"] / 1000, self.attributes)
                self._after = commit["commit_no"]

    def _lag(self, _options) -> Iterator:
        for topic, partition, lag in self._queries.lag_per_partition(self.engine, self.job):
            yield self._observation(lag, {**self.attributes, "topic": topic, "partition": partition})

    def _freshness(self, _options) -> Iterator:
        """Read from Kafka only when the job's position moved since the last collection."""
        from streamfill.connectors.kafka.broker import Broker
        from streamfill.partitions import TopicPartition

        last = {TopicPartition(t, p): o - 1 for t, p, o in self._queries.positions(self.engine, self.job)}
        known, newest = self._fresh
        if last != known and self.kafka:
            self._broker = self._broker or Broker(self.kafka, timeout_s=2)
            # nothing found (a transaction's marker stands before every position): no value, never a stale one
            stamps = self._broker.record_timestamps(last)
            newest = max(stamps.values()) / 1000 if stamps else None
            self._fresh = (last, newest)
        if newest is not None:
            yield self._observation(newest, self.attributes)

    def close(self) -> None:
        self.engine.dispose()


@contextmanager
def job_metrics(url: str, job: str, kafka: Mapping[str, str] | None = None,
                env: Mapping[str, str] = os.environ) -> Iterator[JobMetrics | None]:
    """The launch's metrics while the block runs (None when no exporter is set), counting a launch refused or
    fenced because another holds the job; exported once more at its end, so a short launch's figures (a refused
    one's, say) reach an OTLP collector too."""
    names = exporters(env)
    if not names:
        yield None
        return
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    provider = MeterProvider(metric_readers=_readers(names, env),
                             resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", METER)}))
    metrics = JobMetrics(provider.get_meter(METER), url, job, kafka)
    try:
        yield metrics
    except (JobBusy, Fenced):
        metrics.fenced.add(1, metrics.attributes)
        raise
    finally:
        metrics.observe()
        try:
            provider.shutdown()
        except Exception as exc:  # the launch's own outcome matters more than its last export
            log.warning("metrics: the last export failed: %s", exc)
        metrics.close()


"""One pipeline entry (docs/pipelines.md): a topic, how its values are read, typed columns with rules,
the target table (or the tables a route picks from), whether records delete, and the schedules of its DAGs.
Validated by pydantic when the jobs file is loaded; every error names the field, the value and the fix (the
loader adds the file and the job).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, field_validator, model_validator

from streamfill import durations
from streamfill.changes import NO_DELETES, SOURCE_POSITION, TOMBSTONE, DeletesMode
from streamfill.connectors.kafka.offsets import START_HELP, parse_start
from streamfill.connectors.kafka.source_declarations import SUBSCRIBE, SUBSCRIBE_PATTERN
from streamfill.connectors.postgres.sink_options import APPEND_NEW, KAFKA_COORDINATES, SinkMode
from streamfill.durations import DEFAULT_STOP_GRACE, stop_grace_seconds
from streamfill.errors import OptionError
from streamfill.names import parse_table, validate_job_name
from streamfill.rules import Rule
from streamfill.spark_jobs.pipelines import debezium, entry_checks, routes
from streamfill.spark_jobs.pipelines.columns import (
    COORDINATES,
    FIELD_PATH,
    KAFKA_TIMESTAMP,
    RAW_COLUMNS,
    ColumnSpec,
    check_column_names,
)
from streamfill.spark_jobs.pipelines.cron import check_cron
from streamfill.spark_jobs.pipelines.debezium_settings import DebeziumSettings
from streamfill.spark_jobs.pipelines.nested_specs import CONN_ID, HealthSpec, RegistrySpec, SparkSpec
from streamfill.spark_jobs.pipelines.routes import Route, RouteTable
from streamfill.trigger_grammar import parse_trigger

# an entry's refused trigger keeps its own, shorter fix; the flag's TRIGGER_FIX also says what available-now does
_TRIGGER_FIX = "use available-now or an interval such as 5s, 500ms or 1m"


class PipelineSpec(BaseModel):
    """One entry under `jobs:`; `name` is its key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    topic: str | None = Field(None, min_length=1)
    topics: list[str] | None = Field(None, min_length=1)
    topic_pattern: str | None = Field(None, min_length=1)
    format: Literal["json", "avro", "raw", "debezium"] = "json"
    avro_schema: str | None = None
    avro_wire_format: Literal["plain", "confluent"] = "plain"  # confluent: magic byte and schema id first
    schema_registry: RegistrySpec | None = None
    columns: dict[str, ColumnSpec] = Field(default_factory=dict)
    derived: dict[str, str] = Field(default_factory=dict)
    table: str = Field(min_length=1)  # a routed entry's is its first route table
    key: list[str] = Field(default_factory=lambda: list(KAFKA_COORDINATES), min_length=1)
    mode: SinkMode = APPEND_NEW  # format debezium's default is replace
    deletes: DeletesMode = NO_DELETES  # tombstone: a null value deletes the row of its Kafka key
    # format debezium: the path into the change event of its position in the source's log, or none
    position: str | None = None
    # format debezium: how the connector wrote the values of events that come without their schema
    debezium: DebeziumSettings | None = None
    # mode replace: what orders a key's versions between partitions (within one, the offset): the Kafka timestamp,
    # or a column of the entry (a number, a date or a time); a Debezium entry's is its position
    version: str = KAFKA_TIMESTAMP
    route: Route | None = None
    dead_letters: bool = True
    quality: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    trigger: str = "10s"
    max_offsets_per_trigger: StrictInt | None = Field(None, ge=1)
    start: str = "earliest"  # where the stream starts while offsets_db has no position for its job
    # where the stream's checkpoint lives, as <checkpoint_dir>/<job>: a directory, or shared storage Spark reaches
    # (hdfs://, s3a://, abfss://) so a retry on another Airflow worker finds it; default STREAMFILL_HOME/checkpoints
    checkpoint_dir: str | None = Field(None, min_length=1)
    # a consumer group the stream's committed offsets are mirrored to after each commit (lag tools read it)
    commit_to_group: str | None = Field(None, min_length=1, pattern=r"^\S+$")
    # how long a stopped stream may take to commit its batch in flight before it cuts it (docs/airflow.md)
    stop_grace: str = DEFAULT_STOP_GRACE
    interval_table: str | None = None
    schedule: str = "0 * * * *"
    quality_schedule: str = "*/30 * * * *"
    health: HealthSpec = HealthSpec()
    announce_every: str = "1m"  # at most one asset event per this long announces the stream's commits
    # the Airflow connections of the entry's tasks; none: the defaults (orchestration/endpoints.py ConnIds)
    kafka_conn_id: str | None = Field(None, pattern=CONN_ID)
    postgres_conn_id: str | None = Field(None, pattern=CONN_ID)
    schema_registry_conn_id: str | None = Field(None, pattern=CONN_ID)
    spark_conn_id: str | None = Field(None, pattern=CONN_ID)  # the apache-spark provider's connection
    spark: SparkSpec = SparkSpec()

    _folder: Path | None = PrivateAttr(None)  # the jobs file's folder: avro_schema is relative to it
    _registry_reader: dict | None = PrivateAttr(None)  # the subject's schema its columns came from (a launch's)

    @model_validator(mode="before")
    @classmethod
    def _implied(cls, data: Any) -> Any:
        return entry_checks.implied(data)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return validate_job_name(v)

    @field_validator("table", "interval_table")
    @classmethod
    def _table(cls, v: str | None) -> str | None:
        if v is not None:
            parse_table(v)
        return v

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{v!r} is not a regular expression ({exc}); e.g. \"payments-.*\"") from None
        return v

    @field_validator("start", "stop_grace", "trigger")
    @classmethod
    def _parsed(cls, v: str, info) -> str:
        """Checked by the parser the launch uses, so an entry and a flag are refused alike."""
        parse, fix = {"start": (parse_start, f"use {START_HELP}"), "stop_grace": (stop_grace_seconds, None),
                      "trigger": (parse_trigger, _TRIGGER_FIX)}[info.field_name]
        try:
            parse(v, info.field_name)
        except OptionError as exc:
            raise ValueError(f"{info.field_name} {v!r} {exc.problem}; {fix or exc.fix}") from None
        return v

    @field_validator("schedule", "quality_schedule")
    @classmethod
    def _cron(cls, v: str, info) -> str:
        """Judged as Airflow judges the DAG's timetable, so `jobs check` refuses what the DAG processor would."""
        try:
            return check_cron(v, info.field_name)
        except OptionError as exc:
            raise ValueError(f"{exc.problem}; {exc.fix}") from None

    @field_validator("health")
    @classmethod
    def _health(cls, v: HealthSpec) -> HealthSpec:
        if v.every_minutes > 60:
            raise ValueError(f"health.every_minutes {v.every_minutes} is more than 60: its cron {v.schedule} counts "
                             "minutes within each hour, so the check would run hourly; use 1 to 60")
        return v

    @field_validator("announce_every")
    @classmethod
    def _announce_every(cls, v: str) -> str:
        ms = durations.parse_ms(v, default_unit="s")
        if ms is None or ms < 1000:
            raise ValueError(f"announce_every {v!r} is not a duration of a second or more; e.g. 30s, 1m or 5m")
        return v

    @property
    def announce_every_s(self) -> float:
        return durations.parse_ms(self.announce_every, default_unit="s") / 1000

    @field_validator("columns")
    @classmethod
    def _column_names(cls, v: dict[str, ColumnSpec]) -> dict[str, ColumnSpec]:
        check_column_names(v)
        return v

    @field_validator("position")
    @classmethod
    def _position(cls, v: str | None) -> str | None:
        if v is not None and v != debezium.NO_POSITION and not FIELD_PATH.fullmatch(v):
            raise ValueError(f"position {v!r} is not a path into the change event; use names joined by dots, e.g. "
                             f"position: {debezium.DEFAULT_POSITION} (PostgreSQL) or source.scn (Oracle), or "
                             f"position: {debezium.NO_POSITION}")
        return v

    @field_validator("quality")
    @classmethod
    def _quality_shape(cls, v: list[dict[str, dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
        for entry in v:
            if len(entry) != 1:
                raise ValueError(f"quality entry {entry} must be one expectation name with its keyword arguments, "
                                 "e.g. - expect_column_values_to_be_unique: {column: payment_id}")
        return v

    @model_validator(mode="after")
    def _whole(self) -> PipelineSpec:
        entry_checks.check_entry(self)
        return self

    def rules(self, column: str) -> tuple[Rule, ...]:
        """The rules of one column, required if it is part of the key."""
        return self.columns[column].rules(key=column in self.key)

    def table_columns(self) -> list[str]:
        """Every column the parse gives the sink before its own, in order: Kafka's coordinates, a Debezium
        event's position, the columns (every route table's once), the derived columns."""
        if self.format == "raw":
            return [*COORDINATES, *RAW_COLUMNS]
        position = [SOURCE_POSITION] if self.format == "debezium" else []
        return [*COORDINATES, *position, *self.all_columns, *self.all_derived]

    @property
    def windowed(self) -> bool:
        """The entry has an interval DAG and a place on the replay form: each writes one topic's window into one
        table, so a routed entry (several tables) has neither."""
        return self.topic is not None and self.route is None

    @property
    def all_columns(self) -> dict[str, ColumnSpec]:
        """The columns the parse gives: the entry's, or each route table's once (a name has one type across the
        tables; the first table's column stands for it)."""
        return self.columns if self.route is None else routes.union_columns(self.route_tables())

    @property
    def all_derived(self) -> list[str]:
        """The names of the derived columns the parse gives: the entry's, or each route table's once."""
        return list(self.derived) if self.route is None else routes.union_derived(self.route_tables())

    def route_tables(self) -> list[RouteTable]:
        """The tables a routed entry writes, each with the value that picks it; empty when it is not routed."""
        if self.route is None:
            return []
        return routes.tables_of(self.route, routes.EntryDefaults(self.columns, self.derived, self.key, self.mode))

    @property
    def can_delete(self) -> bool:
        """Records may delete rows, so the parse gives `_delete`: tombstones, or Debezium's change events."""
        return self.deletes == TOMBSTONE or self.format == "debezium"

    @property
    def version_column(self) -> str | None:
        """The entry's column that orders a key's versions before the Kafka timestamp (the sink's versionColumn);
        None for the default order (a Debezium entry's position is its source_position column)."""
        return None if self.version == KAFKA_TIMESTAMP else self.version

    @property
    def position_path(self) -> str | None:
        """The path of a Debezium event's position in its source's log; None without one."""
        if self.format != "debezium":
            return None
        path = self.position or debezium.DEFAULT_POSITION
        return None if path == debezium.NO_POSITION else path

    @property
    def avro_values(self) -> bool:
        """The values are Avro, decoded to JSON text before their columns are read."""
        return self.format == "avro" or (self.format == "debezium" and self.schema_registry is not None)

    @property
    def columns_from_registry(self) -> bool:
        """The entry names a subject instead of columns: its columns are the subject's latest version's fields."""
        return self.schema_registry is not None and not self.columns

    @property
    def registry_reader_schema(self) -> dict | None:
        """The schema a launch took this entry's columns from (with_columns), read as the values' reader schema."""
        return self._registry_reader

    @property
    def wire_format(self) -> str:
        return "confluent" if self.schema_registry is not None else self.avro_wire_format

    @property
    def registry_subject(self) -> str | None:
        if self.schema_registry is None:
            return None
        return self.schema_registry.subject or f"{self.topic}-value"

    def with_columns(self, columns: dict[str, dict], reader_schema: dict) -> PipelineSpec:
        """This entry with the columns a registry's schema gives, and that schema as the values' reader schema."""
        body = self.model_dump(by_alias=True, exclude_unset=True, exclude={"name"})
        resolved = PipelineSpec(name=self.name, **{**body, "columns": columns})
        resolved._folder, resolved._registry_reader = self._folder, reader_schema
        return resolved

    @property
    def topics_option(self) -> tuple[str, str]:
        """The source's subscription option: ("subscribe", "a,b") or ("subscribePattern", "x-.*")."""
        if self.topic_pattern is not None:
            return SUBSCRIBE_PATTERN.key, self.topic_pattern
        return SUBSCRIBE.key, ",".join(self.topics or [self.topic])

    @property
    def interval_target(self) -> str:
        return self.interval_table or f"{self.table}_intervals"

    @property
    def avro_schema_path(self) -> Path | None:
        if self.avro_schema is None:
            return None
        path = Path(self.avro_schema)
        return path if path.is_absolute() or self._folder is None else self._folder / path

"""One pipeline entry (docs/pipelines.md): a topic, how its values are read, typed columns with rules,
the target
table, and the schedules of its DAGs. Validated by pydantic when the jobs file is loaded; every error names the
field, the value and the fix (the loader adds the file and the job).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, field_validator, model_validator

from streamfill.connectors.kafka.offsets import START_HELP, parse_start
from streamfill.connectors.postgres.sink_options import APPEND_NEW, SinkMode
from streamfill.spark_jobs.pipelines.types import NUMERIC, ORDERED, ColumnType, TypeSyntaxError, parse_type
from streamfill import durations
from streamfill.durations import DEFAULT_STOP_GRACE, stop_grace_seconds
from streamfill.errors import OptionError
from streamfill.names import parse_table, validate_job_name
from streamfill.rules import Rule, rules_of

COORDINATES = ("topic", "partition", "offset", "kafka_timestamp")  # every table has them
RAW_COLUMNS = ("key", "value", "headers")  # format raw: the record as it came
RESERVED = (*COORDINATES, "_error", "_raw")
COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
FIELD_PATH = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*(\.[A-Za-z_$][A-Za-z0-9_$-]*)*")


class Column(BaseModel):
    """A typed column of the table, read from the value's field `field` (default: the column's name)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    type: str
    required: bool = False
    min: Decimal | str | None = None  # numbers for number columns, ISO-8601 text for date and timestamp
    max: Decimal | str | None = None
    in_: list[Any] | None = Field(None, alias="in")
    pattern: str | None = None
    max_length: StrictInt | None = Field(None, ge=1)
    field: str | None = None

    _type: ColumnType = PrivateAttr()

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        try:
            parse_type(v)
        except TypeSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("min", "max", mode="before")
    @classmethod
    def _bound(cls, v: Any) -> Any:
        if isinstance(v, (date, datetime)):  # YAML reads 2026-01-01 as a date
            return v.isoformat()
        if isinstance(v, bool):
            raise ValueError(f"{v} is not a bound; give a number, or an ISO-8601 date or time")
        return v

    @field_validator("field")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not FIELD_PATH.fullmatch(v):
            raise ValueError(f"field {v!r} is not a path into the value; use names joined by dots, e.g. customer.id")
        return v

    @model_validator(mode="after")
    def _rules_fit_the_type(self) -> Column:
        t = parse_type(self.type)
        self._type = t
        kind = t.name
        if (self.min is not None or self.max is not None) and kind not in ORDERED:
            raise ValueError(f"min/max do not apply to type {t}; use them on int, bigint, double, decimal, date or "
                             "timestamp columns")
        limits = {"int": 2**31, "bigint": 2**63}
        for rule in ("min", "max"):
            value = getattr(self, rule)
            if kind in NUMERIC and isinstance(value, str):
                raise ValueError(f"{rule} {value!r} is not a number, as a {t} column needs")
            if kind in limits and value is not None and (value != value.to_integral_value()
                                                         or not -limits[kind] <= value < limits[kind]):
                raise ValueError(f"{rule} {value} is not a whole number that fits {t}; give one, e.g. {rule}: 0")
            if kind in ("date", "timestamp") and value is not None and not _iso(str(value)):
                raise ValueError(f"{rule} {value!r} is not an ISO-8601 {kind}, as a {t} column needs, "
                                 "e.g. 2026-01-01")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}; make min at most max")
        if self.in_ is not None:
            if kind not in ("string", "int", "bigint", "decimal", "double", "date"):
                raise ValueError(f"in does not apply to type {t}; use it on string or number columns")
            if not self.in_:
                raise ValueError("in lists no value; list the allowed values, e.g. in: [EUR, USD]")
            if kind in NUMERIC and not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.in_):
                raise ValueError(f"in {self.in_} has values that are not numbers, as a {t} column needs")
            if kind in ("string", "date") and not all(isinstance(v, str) for v in self.in_):
                odd = [v for v in self.in_ if not isinstance(v, str)]
                raise ValueError(f"in {self.in_} has values that are not text ({odd}; YAML reads no, on, yes and "
                                 "dates as other types); quote them, e.g. in: [\"NO\", \"ON\"]")
        if self.pattern is not None:
            if kind != "string":
                raise ValueError(f"pattern does not apply to type {t}; use it on string columns")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regular expression ({exc})") from None
        if self.max_length is not None and kind != "string":
            raise ValueError(f"max_length does not apply to type {t}; use it on string columns")
        return self

    @property
    def column_type(self) -> ColumnType:
        return self._type

    def rules(self, key: bool = False) -> tuple[Rule, ...]:
        """The column's rules in the order they are checked (streamfill.rules); a key column is always required."""
        return rules_of({**self.model_dump(by_alias=True), "required": self.required or key})


def _iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


class Health(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    every_minutes: StrictInt = Field(5, ge=1)
    max_commit_age_minutes: StrictInt = Field(15, ge=1)
    max_lag: StrictInt = Field(500_000, ge=0)


class SchemaRegistry(BaseModel):
    """`schema_registry:` of an Avro entry in Confluent's wire format: each value's schema id gives its writer's
    schema. Credentials never go here: they come from the connection streamfill_schema_registry or the
    STREAMFILL_SCHEMA_REGISTRY_* settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str | None = Field(None, min_length=1)  # Confluent's default: <topic>-value
    url: str | None = Field(None, pattern=r"^https?://")  # default: the connection's or the setting's


class PipelineSpec(BaseModel):
    """One entry under `jobs:`; `name` is its key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    topic: str | None = Field(None, min_length=1)
    topics: list[str] | None = Field(None, min_length=1)
    topic_pattern: str | None = Field(None, min_length=1)
    format: Literal["json", "avro", "raw"] = "json"
    avro_schema: str | None = None
    avro_wire_format: Literal["plain", "confluent"] = "plain"  # confluent: magic byte and schema id first
    schema_registry: SchemaRegistry | None = None
    columns: dict[str, Column] = Field(default_factory=dict)
    derived: dict[str, str] = Field(default_factory=dict)
    table: str = Field(min_length=1)
    key: list[str] = Field(default_factory=lambda: ["topic", "partition", "offset"], min_length=1)
    mode: SinkMode = APPEND_NEW
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
    health: Health = Health()
    announce_every: str = "1m"  # at most one asset event per this long announces the stream's commits

    _folder: Path | None = PrivateAttr(None)  # the jobs file's folder: avro_schema is relative to it
    _registry_reader: dict | None = PrivateAttr(None)  # the subject's schema its columns came from (a launch's)

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

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, v: str) -> str:
        text = v.strip().lower()
        found = durations.split(text)
        if text not in ("available-now", "availablenow") and (not found or found[1] not in ("ms", "s", "m")
                                                              or found[0] == 0):
            raise ValueError(f"trigger {v!r} is not a trigger; use available-now or an interval such as 5s, 500ms "
                             "or 1m")
        return v

    @field_validator("start", "stop_grace")
    @classmethod
    def _parsed(cls, v: str, info) -> str:
        """Checked by the parser the launch uses, so an entry and a flag are refused alike."""
        parse, fix = {"start": (parse_start, f"use {START_HELP}"), "stop_grace": (stop_grace_seconds, None)}[
            info.field_name]
        try:
            parse(v, info.field_name)
        except OptionError as exc:
            raise ValueError(f"{info.field_name} {v!r} {exc.problem}; {fix or exc.fix}") from None
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
    def _column_names(cls, v: dict[str, Column]) -> dict[str, Column]:
        for name in v:
            if not COLUMN_NAME.fullmatch(name):
                raise ValueError(f"column name {name!r} is not valid; use letters, digits and _ (at most 63), "
                                 "starting with a letter or _")
            if name in RESERVED:
                raise ValueError(f"column name {name!r} is taken by the platform ({', '.join(RESERVED)}); "
                                 f"name it otherwise and read it with field: {name}")
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
        given = [k for k in ("topic", "topics", "topic_pattern") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of topic, topics or topic_pattern ({', '.join(given) or 'none'} "
                             "given), e.g. topic: payments")
        if self.format == "raw":
            if self.columns or self.derived:
                raise ValueError("format raw keeps key, value and headers as they are: remove columns and derived, "
                                 "or use format json or avro")
        elif not self.columns and self.schema_registry is None:
            raise ValueError(f"format {self.format} needs columns: the value's fields, each with a type, e.g. "
                             "columns: {payment_id: {type: string, required: true}}")
        if self.schema_registry is not None:
            if self.format != "avro":
                raise ValueError("schema_registry is for Avro values in Confluent's wire format; set format: avro")
            if "avro_wire_format" in self.model_fields_set and self.avro_wire_format != "confluent":
                raise ValueError("schema_registry reads Confluent's wire format (magic byte and schema id); remove "
                                 "avro_wire_format: plain")
            if self.schema_registry.subject is None and self.topic is None:
                raise ValueError("schema_registry needs a subject when the entry reads topics or a topic_pattern; "
                                 "e.g. schema_registry: {subject: payments-value}")
        elif self.format == "avro" and not self.avro_schema:
            raise ValueError("format avro needs avro_schema (the .avsc file, relative to the jobs file) or "
                             "schema_registry (the writer's schema of each value by its id)")
        if self.format != "avro" and self.avro_schema:
            raise ValueError(f"avro_schema is only for format avro, not {self.format}; remove it or set format: avro")
        clash = sorted(set(self.derived) & (set(self.columns) | set(RESERVED) | set(RAW_COLUMNS)))
        if clash:
            raise ValueError(f"derived column(s) {', '.join(clash)} already exist; give them other names")
        for name in self.derived:
            if not COLUMN_NAME.fullmatch(name):
                raise ValueError(f"derived column name {name!r} is not valid; use letters, digits and _")
        known = self.table_columns()
        missing = [k for k in self.key if k not in known]
        if self.columns_from_registry:
            missing = []  # checked again once the subject's schema gives the columns (with_columns)
        if missing:
            raise ValueError(f"key column(s) {', '.join(missing)} are not columns of the table (columns: "
                             f"{', '.join(known)}); name declared columns, e.g. "
                             f"key: [{next(iter(self.columns), 'id')}]")
        if len(set(self.key)) != len(self.key):
            raise ValueError(f"key {self.key} names a column twice")
        return self

    def rules(self, column: str) -> tuple[Rule, ...]:
        """The rules of one column, required if it is part of the key."""
        return self.columns[column].rules(key=column in self.key)

    def table_columns(self) -> list[str]:
        """Every column of the target table, in order."""
        own = list(RAW_COLUMNS) if self.format == "raw" else [*self.columns, *self.derived]
        return [*COORDINATES, *own]

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
            return "subscribePattern", self.topic_pattern
        return "subscribe", ",".join(self.topics or [self.topic])

    @property
    def interval_target(self) -> str:
        return self.interval_table or f"{self.table}_intervals"

    @property
    def avro_schema_path(self) -> Path | None:
        if self.avro_schema is None:
            return None
        path = Path(self.avro_schema)
        return path if path.is_absolute() or self._folder is None else self._folder / path

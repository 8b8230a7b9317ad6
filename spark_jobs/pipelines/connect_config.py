"""`streamfill jobs from-connect`: a Kafka Connect JDBC sink's configuration (Confluent's or Debezium's) as pipeline
entries, or a refusal naming every setting streamfill cannot carry, all at once. docs/from-connect.md sets the
settings side by side and says why each difference exists. Pure: an existing table's columns come in as values
(connect_columns reads them), and every entry written is checked as `jobs check` checks it."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

import yaml
from pydantic import ValidationError

from streamfill.changes import TOMBSTONE
from streamfill.connectors.kafka.offsets import CONNECT_GROUP_PREFIX, GROUP_START
from streamfill.connectors.postgres.sink_options import APPEND_NEW, REPLACE
from streamfill.errors import OptionError, StreamfillError
from streamfill.names import JOB_NAME, JOB_NAME_RULE, parse_table
from streamfill.spark_jobs.pipelines import connect_transforms
from streamfill.spark_jobs.pipelines.columns import COLUMN_NAME, RESERVED
from streamfill.spark_jobs.pipelines.connect_columns import ExistingTable
from streamfill.spark_jobs.pipelines.connect_forms import ConnectorConfig, shown
from streamfill.spark_jobs.pipelines.nested_specs import CONN_ID
from streamfill.spark_jobs.pipelines.spec import PipelineSpec

CONFLUENT = "io.confluent.connect.jdbc.JdbcSinkConnector"
DEBEZIUM = "io.debezium.connector.jdbc.JdbcSinkConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
AVRO_CONVERTER = "io.confluent.connect.avro.AvroConverter"
TOPIC = "${topic}"
CONNECT_COORDINATES = ("__connect_topic", "__connect_partition", "__connect_offset")  # pk.mode=kafka's columns
UTC_NAMES = ("UTC", "Etc/UTC", "GMT", "Z", "+00:00")
PAYLOAD = "payload"  # JsonConverter with schemas.enable: the value's fields are under it

# where an entry's columns come from: the key's fields only (typed string, to be completed by hand), an existing
# table the connector wrote, or the value subject's latest schema in the converter's registry
ColumnSource = Literal["keys", "table", "registry"]
KEYS, TABLE, REGISTRY = "keys", "table", "registry"


@dataclass(frozen=True)
class Sink:
    """What the two JDBC sinks call the same things."""

    label: str
    pk_mode: str
    pk_fields: str
    table_formats: tuple[str, ...]  # the setting, then its deprecated alias
    time_zones: tuple[str, ...]
    quoting: str  # the setting that quotes identifiers
    quotes_by_default: bool
    users: tuple[str, ...]  # the settings of its database's credentials
    dropped: Mapping[str, str]  # settings that change nothing an entry says -> what streamfill does instead ("")
    dropped_prefixes: tuple[str, ...] = ()


_RETRIES = "a failed batch commits nothing and is read again by the next launch (Airflow's retries)"
_FRAMEWORK_DROPPED = {
    "tasks.max": "Spark's tasks follow the topic's partitions",
    "header.converter": "", "config.action.reload": "", "errors.deadletterqueue.context.headers.enable": "",
    "errors.deadletterqueue.topic.replication.factor": "",
    "errors.retry.timeout": _RETRIES, "errors.retry.delay.max.ms": _RETRIES,
    "errors.log.enable": "each dead letter keeps its reason (_error) and raw value (_raw) in offsets_db",
    "errors.log.include.messages": "",
}
SINKS = {
    CONFLUENT: Sink(
        "Confluent's JDBC sink", "pk.mode", "pk.fields", ("table.name.format",), ("db.timezone",),
        "quote.sql.identifiers", True, ("connection.user", "connection.password", "jdbc.credentials.provider.class"),
        {"connection.attempts": _RETRIES, "connection.backoff.ms": _RETRIES, "max.retries": _RETRIES,
         "retry.backoff.ms": _RETRIES, "batch.size": "a batch is one micro-batch in one transaction (trigger, "
         "max_offsets_per_trigger)", "date.calendar.system": "", "mssql.use.merge.holdlock": "",
         "trim.sensitive.log": "", "string.output.value.column.name": "",
         "replace.null.with.default": "a null field lands as null, not as its schema's default"}),
    DEBEZIUM: Sink(
        "Debezium's JDBC sink", "primary.key.mode", "primary.key.fields", ("collection.name.format",
                                                                           "table.name.format"),
        ("use.time.zone", "database.time_zone"), "quote.identifiers", False,
        ("connection.username", "connection.password"),
        {"connection.provider": "", "connection.pool.min_size": "", "connection.pool.max_size": "",
         "connection.pool.acquire_increment": "", "connection.pool.timeout": "", "connection.restart.on.errors": "",
         "flush.max.retries": _RETRIES, "flush.retry.delay.ms": _RETRIES, "internal.enable.sces": "",
         "batch.size": "a batch is one micro-batch in one transaction (trigger, max_offsets_per_trigger)",
         "use.reduction.buffer": "within a batch only each key's newest record is written, always",
         "cloud.events.schema.name.pattern": ""},
        ("hibernate.", "dialect.postgres.", "dialect.sqlserver.", "dialect.starrocks.")),
}
_NAMING = {"io.debezium.sink.naming.DefaultCollectionNamingStrategy": False,
           "io.debezium.connector.jdbc.naming.DefaultTableNamingStrategy": False,
           "io.debezium.sink.naming.PassthroughCollectionNamingStrategy": True}  # -> the topic as it is
_COLUMN_NAMING = ("io.debezium.connector.jdbc.naming.DefaultColumnNamingStrategy",
                  "io.debezium.sink.naming.DefaultColumnNamingStrategy")
# value.converter.* settings that change nothing of what the entry reads
_CONVERTER_KEPT = ("schemas.cache.size", "enhanced.avro.schema.support", "connect.meta.data", "auto.register.schemas",
                   "use.latest.version", "latest.compatibility.strict", "schemas.enable", "schema.registry.url",
                   "value.subject.name.strategy")
_CONVERTER_CREDENTIALS = ("basic.auth.", "schema.registry.basic.auth.", "schema.registry.ssl.", "bearer.auth.")
_TOPIC_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
# what Connect's JsonConverter writes a logical type as inside `payload`, which format json reads as text
_CONNECT_JSON_ENCODED = {"decimal": "a Decimal as base64 bytes", "date": "a Date as days since 1970",
                         "timestamp": "a Timestamp as milliseconds since 1970"}
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
COLUMNS_COMMENT = ("columns: only the key's, typed string (the connector takes its columns from each record's "
                   "schema, which its configuration does not show). Add every column the table keeps, each with "
                   "its type (docs/pipelines.md, Types), or run from-connect again with --columns-from-table (the "
                   "table the connector wrote) or --columns-from-registry.")


class NotCarried(StreamfillError, ValueError):
    """Settings of a connector streamfill cannot carry: each named with its value, the problem and the fix."""

    kind = OptionError.kind  # what the user gave cannot be used, as a bad option cannot

    def __init__(self, connector: str, errors: tuple[OptionError, ...]) -> None:
        self.connector, self.errors = connector, errors
        lines = [f"- {e.option}" + (f"={e.value!r}" if e.value is not None else " (not set)") + f": {e.problem}. "
                 f"{e.fix}" for e in errors]
        super().__init__(f"connector {connector}: {len(errors)} setting(s) streamfill cannot carry, so no entry "
                         "is written:\n" + "\n".join(lines))


@dataclass(frozen=True)
class Choices:
    """What the command line adds to the configuration."""

    job: str | None = None  # the job's name (default: the connector's)
    name: str | None = None  # the connector's name, for a flat configuration without one
    columns: ColumnSource | None = None  # None: the registry for Avro values, else the key's fields
    # (host, port, database) of streamfill's database; a connector writing another one gets postgres_conn_id
    database: tuple[str, int, str] | None = None
    postgres_conn_id: str | None = None


@dataclass(frozen=True)
class Entry:
    job: str
    body: Mapping[str, object]  # the entry's settings in the order written
    table: str
    keys_only: bool = False  # its columns are the key's only, to be completed by hand


@dataclass(frozen=True)
class Translation:
    connector: str
    connector_class: str
    group: str  # the consumer group the connector commits in, which the entries start from
    entries: tuple[Entry, ...]
    notes: tuple[str, ...]

    def yaml(self) -> str:
        """The jobs file (or jobs.d/ file) of the entries, the notes as comments above them."""
        lines = [f"# from Kafka Connect connector {self.connector} ({self.connector_class}) by streamfill jobs "
                 "from-connect", "# what differs from the connector (docs/from-connect.md):"]
        lines += [textwrap.indent(textwrap.fill(note, 114, initial_indent="- ", subsequent_indent="  ",
                                                break_on_hyphens=False), "# ") for note in self.notes]
        lines.append("jobs:")
        for entry in self.entries:
            text = yaml.safe_dump({entry.job: dict(entry.body)}, sort_keys=False, default_flow_style=None,
                                  width=116, allow_unicode=True)
            for line in textwrap.indent(text, "  ").splitlines():
                if entry.keys_only and line == "    columns:":
                    lines += textwrap.indent(textwrap.fill(COLUMNS_COMMENT, 110, break_on_hyphens=False),
                                             "    # ").splitlines()
                lines.append(line)
        return "\n".join(lines) + "\n"


TableReader = Callable[[str], "ExistingTable | None"]


def translate(config: ConnectorConfig, choices: Choices = Choices(),
              tables: TableReader | None = None) -> Translation:
    """The entries of `config`, or NotCarried naming every setting that cannot be carried. `tables` reads an
    existing table's columns (choices.columns "table")."""
    return _Translation(config, choices, tables).run()


class _Translation:
    """One translation's state: the settings read so far, the refusals and the notes."""

    def __init__(self, config: ConnectorConfig, choices: Choices, tables: TableReader | None) -> None:
        self.config, self.choices, self.tables = config, choices, tables
        self.s = config.settings
        self.read: set[str] = set()
        self.errors: list[OptionError] = []
        self.notes: list[str] = []

    @property
    def unquoted(self) -> bool:
        """The connector writes names without quotes, so PostgreSQL folds them to lower case."""
        quoting = self.get(self.sink.quoting) or str(self.sink.quotes_by_default)
        return quoting.lower() not in ("always", "true")

    def get(self, key: str, default: str | None = None) -> str | None:
        self.read.add(key)
        value = self.s.get(key)
        return default if value is None or value == "" else value

    def refuse(self, setting: str, value: str | None, problem: str, fix: str) -> None:
        self.read.add(setting)
        self.errors.append(OptionError(setting, shown(setting, value), problem, fix))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- the whole translation

    def run(self) -> Translation:
        connector = self.config.name or self.choices.name
        cls = self.get("connector.class")
        if cls not in SINKS:
            self.refuse("connector.class", cls, "is not a JDBC sink streamfill can stand in for" if cls else
                        "is missing", f"from-connect reads {CONFLUENT} and {DEBEZIUM}")
            if not self.s.get("name") and not connector:
                self.refuse("name", None, "is missing (the flat form of PUT /connectors/NAME/config has it in "
                            "the URL)", "give --name NAME, the connector's name")
            raise NotCarried(connector or "(unnamed)", tuple(self.errors))
        self.sink = SINKS[cls]
        self.read.add("name")
        if not connector:
            self.refuse("name", None, "is missing (the flat form of PUT /connectors/NAME/config has it in the URL)",
                        "give --name NAME, the connector's name")
            connector = "(unnamed)"
        job = self.choices.job or connector
        if not JOB_NAME.fullmatch(job):
            self.refuse("name", connector, f"is no job name ({JOB_NAME_RULE})", "give the job a name with --job NAME "
                        "(the consumer group stays the connector's)")
        group = self.get("consumer.override.group.id") or f"{CONNECT_GROUP_PREFIX}{connector}"
        self.note(f"the stream starts at the committed offsets of consumer group {group} (the connector's, unless "
                  "the Connect worker sets consumer.group.id: then write that group into start). Stop the connector "
                  f"first: PUT /connectors/{connector}/stop")
        topics, pattern = self._topics()
        self.transforms = connect_transforms.read(self.s, self.refuse, self.note)
        self.read |= {k for k in self.s if k.startswith("transforms.") or k == "transforms"}
        self._predicates()
        fmt, registry, wrapped = self._values()
        schema, conn_id = self._database()
        mode, deletes, key_mode, fields = self._changes(fmt)
        self._framework()
        self._sink_settings()
        source = self.choices.columns or (REGISTRY if registry is not None else KEYS)
        if source == REGISTRY and registry is None:
            self.refuse("value.converter", self.get("value.converter"), "does not write Avro through a schema "
                        "registry, so --columns-from-registry has no subject to read", "use --columns-from-table, "
                        "or leave the flag out and complete the columns by hand")
        if wrapped and deletes == TOMBSTONE:
            self.refuse("value.converter.schemas.enable", self.s.get("value.converter.schemas.enable") or
                        "true (default)", "puts the value's fields under payload, and a tombstone's key fields are "
                        "read by the same paths as the value's (its own payload unwrapped)", "use the Avro converter, "
                        "or schemas.enable=false on the producers and the connector")
        entries = []
        for topic, table in self._tables(topics, pattern, schema):
            body: dict[str, object] = {}
            if pattern is not None:
                body["topic_pattern"] = pattern
            elif topic is not None:
                body["topic"] = topic
            else:
                body["topics"] = list(topics)
            body["format"] = fmt
            if registry is not None:
                body["schema_registry"] = registry
            columns, key = self._columns(source, table, key_mode, fields, wrapped)
            if columns:
                body["columns"] = columns
            body["table"] = table
            if key:
                body["key"] = list(key)
            body["mode"] = mode
            if deletes:
                body["deletes"] = deletes
            body["start"] = f"{GROUP_START}{group}"
            if conn_id:
                body["postgres_conn_id"] = conn_id
            name = job if topic is None or len(topics) == 1 else f"{job}.{topic}"
            entries.append(Entry(name, body, table, keys_only=source == KEYS))
        self._unknown()
        if self.errors:
            raise NotCarried(connector, tuple(self.errors))
        for entry in entries:
            self._check(entry)
        if self.errors:
            raise NotCarried(connector, tuple(self.errors))
        return Translation(connector, cls, group, tuple(entries), tuple(self.notes))

    def _check(self, entry: Entry) -> None:
        """The entry as `jobs check` reads it; a refusal here is a combination the settings' checks missed."""
        try:
            PipelineSpec(name=entry.job, **entry.body)
        except ValidationError as exc:
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            self.refuse("the entry", entry.job, f"is refused by streamfill's own check: {problems}", "change the "
                        "settings it names, or write the entry by hand")

    # ---- what the connector reads

    def _topics(self) -> tuple[tuple[str, ...], str | None]:
        listed, pattern = self.get("topics"), self.get("topics.regex")
        if listed and pattern:
            self.refuse("topics.regex", pattern, "is given with topics, which Connect refuses too", "keep one")
        if not listed and not pattern:
            self.refuse("topics", None, "is missing (and topics.regex too)", "name the topics the connector reads")
        topics = tuple(dict.fromkeys(t.strip() for t in (listed or "").split(",") if t.strip()))
        return topics, None if listed else pattern

    def _predicates(self) -> None:
        for key in sorted(k for k in self.s if k == "predicates" or k.startswith("predicates.")):
            if key == "predicates" and self.s[key]:
                self.refuse(key, self.s[key], "apply transforms to some records only, and an entry reads every "
                            "record alike", "remove them, or keep Connect for those records")
            self.read.add(key)

    def _values(self) -> tuple[str, dict | None, bool]:
        """(format, schema_registry, whether a flat JSON value's fields are under `payload`)."""
        converter = self.get("value.converter")
        self.read |= {k for k in self.s if k.startswith("key.converter")}
        if converter is None:
            converter = JSON_CONVERTER
            self.note("value.converter is not set, so the connector uses its worker's converter: read as Kafka's "
                      "default, JsonConverter with schemas.enable=true. If the worker writes Avro, add "
                      "value.converter and its schema.registry.url to the configuration and run from-connect again")
        for key in sorted(k for k in self.s if k.startswith("value.converter.")):
            setting = key[len("value.converter."):]
            self.read.add(key)
            if setting.startswith(_CONVERTER_CREDENTIALS):
                self.note("the schema registry's credentials are not copied: streamfill's come from "
                          "STREAMFILL_SCHEMA_REGISTRY_* or the entry's schema_registry_conn_id")
            elif setting not in _CONVERTER_KEPT:
                self.refuse(key, self.s[key], "is a converter setting from-connect does not know to change nothing "
                            "of what lands", "remove it if it does not, or write the entry by hand")
        debezium = self.transforms.unwrap is not None or self.sink is SINKS[DEBEZIUM]
        if self.sink is SINKS[DEBEZIUM] and self.transforms.unwrap is None:
            self.note("Debezium's sink reads change events and flattened rows alike: the entry reads the topic as "
                      "Debezium's change events (format: debezium). If an unwrap on the source connector flattens "
                      "them, make it format: json")
        if converter == JSON_CONVERTER:
            wrapped = (self.get("value.converter.schemas.enable") or "true").lower() == "true"
            return ("debezium" if debezium else "json"), None, wrapped and not debezium
        if converter == AVRO_CONVERTER:
            url = self.get("value.converter.schema.registry.url")
            strategy = self.get("value.converter.value.subject.name.strategy")
            if strategy not in (None, _TOPIC_NAME_STRATEGY):
                self.refuse("value.converter.value.subject.name.strategy", strategy, "names subjects otherwise "
                            "than <topic>-value, which an entry's schema_registry reads by default", "give the entry "
                            "schema_registry: {subject: ...} by hand")
            registry: dict = {}
            if url and "," in url:
                self.refuse("value.converter.schema.registry.url", url, "names several registries, an entry one",
                            "keep one URL")
            elif url:
                registry["url"] = url
            else:
                self.note("value.converter.schema.registry.url is not set: the entry reads the registry of "
                          "STREAMFILL_SCHEMA_REGISTRY_URL (or the connection streamfill_schema_registry)")
            return ("debezium" if debezium else "avro"), registry, False
        self.refuse("value.converter", converter, "writes values streamfill does not read (it reads Connect's "
                    "JsonConverter and Confluent's AvroConverter)", f"use {JSON_CONVERTER} or {AVRO_CONVERTER}, or "
                    "keep Connect")
        return ("debezium" if debezium else "json"), None, False

    def _database(self) -> tuple[str | None, str | None]:
        """(the schema the URL's currentSchema names, the entry's postgres_conn_id when not streamfill's own)."""
        url = self.get("connection.url")
        for user in self.sink.users:
            if self.get(user):
                self.note("the connector's credentials are not copied: the entry reaches its database through "
                          "STREAMFILL_DB_URL or its Airflow connection (postgres_conn_id)")
        dialect = self.get("dialect.name") if self.sink is SINKS[CONFLUENT] else None
        if dialect not in (None, "PostgreSqlDatabaseDialect"):
            self.refuse("dialect.name", dialect, "is not PostgreSQL's, and streamfill writes PostgreSQL",
                        "keep Connect for this database")
        if url is None:
            self.refuse("connection.url", None, "is missing", "give the JDBC URL of the PostgreSQL database")
            return None, None
        match = re.fullmatch(r"jdbc:([A-Za-z0-9]+):(.*)", url)
        if match is None or match[1] != "postgresql":
            kind = match[1] if match else "not a JDBC URL"
            self.refuse("connection.url", url, f"is {kind}, and streamfill writes PostgreSQL", "keep Connect for this "
                        "database, or point the connector's table at a PostgreSQL database")
            return None, None
        rest, _, query = match[2].partition("?")
        params = {k: v[-1] for k, v in parse_qs(query.replace(";", "&")).items()}
        if "user" in params or "password" in params:
            self.note("the connector's credentials are not copied: the entry reaches its database through "
                      "STREAMFILL_DB_URL or its Airflow connection (postgres_conn_id)")
        host, port, database = "localhost", 5432, None
        if rest.startswith("//"):
            netloc, _, path = rest[2:].partition("/")
            first = netloc.split(",")[0]
            host_part, _, port_part = first.rpartition(":") if ":" in first and not first.endswith("]") else \
                (first, "", "")
            host = (host_part or "localhost").strip("[]")
            port = int(port_part) if port_part.isdigit() else 5432
            database = path or None
        elif rest not in ("", "/"):
            database = rest.lstrip("/")
        database = database or params.get("user")
        conn_id = None
        if self.choices.postgres_conn_id or not _same_database((host, port, database), self.choices.database):
            conn_id = self.choices.postgres_conn_id or _conn_id(database or host)
            here = "" if self.choices.database is None else \
                f", not streamfill's {self.choices.database[0]}:{self.choices.database[1]}/{self.choices.database[2]}"
            self.note(f"the connector writes database {database} at {host}:{port}{here}: the entry names the Airflow "
                      f"connection {conn_id}; create it for that database, whose offsets_db schema holds the job "
                      "(streamfill db upgrade against it)")
        return params.get("currentSchema"), conn_id

    def _changes(self, fmt: str) -> tuple[str, str | None, str, tuple[str, ...]]:
        """(mode, deletes, the key mode, its fields): insert.mode, the primary key and delete settings."""
        sink = self.sink
        insert = (self.get("insert.mode") or "insert").lower()
        key_mode = (self.get(sink.pk_mode) or "none").lower()
        fields = tuple(f.strip() for f in (self.get(sink.pk_fields) or "").split(",") if f.strip())
        delete = (self.get("delete.enabled") or "false").lower() == "true"
        events = fmt == "debezium"
        if insert not in ("insert", "upsert", "update"):
            self.refuse("insert.mode", insert, "is not a mode of the sink", "use insert or upsert")
        elif insert == "update":
            self.refuse("insert.mode", insert, "only updates rows that exist, and streamfill's modes insert them "
                        "(append-new keeps the first version, replace the newest)", "use upsert (mode replace)")
        elif insert == "insert" and events:
            self.refuse("insert.mode", "insert" if self.s.get("insert.mode") else "insert (default)", "fails each "
                        "change of a row already written, and a format: debezium entry applies every change (mode "
                        "replace)", "set insert.mode=upsert, what streamfill does with change events")
        modes = ("none", "kafka", "record_key", "record_value")
        if key_mode == "record_header":
            self.refuse(sink.pk_mode, key_mode, "takes the key from headers, and an entry reads columns from the "
                        "value", "use record_key or record_value")
        elif key_mode not in modes:
            self.refuse(sink.pk_mode, key_mode, "is not a key mode of the sink", f"use one of {', '.join(modes)}")
        elif key_mode in ("none", "kafka") and events:
            self.refuse(sink.pk_mode, key_mode if self.s.get(sink.pk_mode) else "none (default)", "names no key of "
                        "the source table, and a format: debezium entry applies each change to the row of its key",
                        "use record_key (the source table's primary key)")
        elif key_mode == "kafka":
            if fields and fields != CONNECT_COORDINATES:
                self.refuse(sink.pk_fields, ",".join(fields), "renames Kafka's coordinate columns, which streamfill "
                            "names topic, partition and offset", "remove it")
            self.note("pk.mode=kafka: streamfill's table has topic, partition, offset and kafka_timestamp where "
                      "Connect's has __connect_topic, __connect_partition and __connect_offset; write into a new "
                      "table (rows Connect wrote have no streamfill coordinates)")
        if insert == "insert" and not events:
            self.note("insert.mode=insert: Connect fails a record whose key is already in the table (or sends it to "
                      "the dead letter queue); streamfill's mode append-new keeps the row there and skips the "
                      "newcomer, silently")
        deletes = None
        if events:
            self._event_deletes(delete)
        elif delete:
            if key_mode != "record_key":
                self.refuse("delete.enabled", "true", f"deletes the rows tombstones name, which needs "
                            f"{sink.pk_mode}=record_key", f"set {sink.pk_mode}=record_key")
            if insert == "insert":
                self.refuse("delete.enabled", "true", "deletes rows beside insert.mode=insert, and streamfill "
                            "deletes only in mode replace", "set insert.mode=upsert")
            deletes = TOMBSTONE
        elif not events:
            self.note("delete.enabled=false: a tombstone fails Connect's task (or goes to its dead letter queue); "
                      "streamfill makes it a dead letter, \"empty value\"")
        if key_mode == "record_key" and not events:
            self.note("the key's fields are read from the value (pk.mode=record_key reads them from the Kafka key): "
                      "each record's value must carry them")
        mode = REPLACE if events or insert == "upsert" else APPEND_NEW
        return mode, deletes, key_mode, fields

    def _event_deletes(self, delete: bool) -> None:
        """A format: debezium entry applies every delete; refused where the connector keeps deleted rows."""
        unwrap = self.transforms.unwrap
        if unwrap is not None and not unwrap.deletes_reach_sink:
            for setting, value in unwrap.dropping:
                self.refuse(setting, value, "drops deletes before the sink, so Connect keeps the rows deleted at the "
                            "source, and a format: debezium entry deletes them (streamfill has no setting to keep "
                            "them)", "keep Connect, or let deletes through (delete.tombstone.handling.mode=tombstone"
                            ", or drop.tombstones=false) with delete.enabled=true before the switch")
        if not delete and (unwrap is None or unwrap.deletes_reach_sink):
            self.refuse("delete.enabled", self.s.get("delete.enabled") or "false (default)", "keeps the rows deleted "
                        "at the source, and a format: debezium entry deletes them (streamfill has no setting to keep "
                        "them)", "keep Connect, or set delete.enabled=true before the switch")
        if delete and self.sink is SINKS[CONFLUENT] and (self.get("pk.mode") or "none") != "record_key":
            self.refuse("delete.enabled", "true", "needs pk.mode=record_key, which Connect refuses otherwise too",
                        "set pk.mode=record_key")
        truncate = (self.get("truncate.enabled") or "false").lower() if self.sink is SINKS[DEBEZIUM] else "false"
        if truncate == "true":
            self.refuse("truncate.enabled", truncate, "empties the table on Debezium's truncate events, and "
                        "streamfill never truncates", "keep Connect, or set truncate.enabled=false")
        else:
            self.note("a Debezium truncate event (op t) is a dead letter, \"unknown Debezium op t\": streamfill "
                      "never empties the table")

    def _framework(self) -> None:
        """errors.* and consumer.override.*: Connect's own settings every connector has."""
        tolerance = (self.get("errors.tolerance") or "none").lower()
        topic = self.get("errors.deadletterqueue.topic.name")
        if tolerance not in ("none", "all"):
            self.refuse("errors.tolerance", tolerance, "is not none or all", "use none or all")
        elif tolerance == "none":
            self.note("errors.tolerance=none stops Connect's task at the first bad record; streamfill never stops "
                      "for one: it becomes a dead letter (offsets_db's dead_letters, with its reason)")
        else:
            self.note("errors.tolerance=all: a record Connect skips is a dead letter in offsets_db's dead_letters, "
                      "with its reason" + (f"; the topic {topic} is not written" if topic else ", where Connect "
                                           "dropped it without a trace"))
        for key in sorted(k for k in self.s if k.startswith(("consumer.override.", "producer.override.",
                                                             "admin.override."))):
            setting, value = key.removeprefix("consumer.override."), self.s[key]
            self.read.add(key)
            if key == "consumer.override.auto.offset.reset" and value.lower() != "earliest":
                self.refuse(key, value, "starts a partition without a committed offset elsewhere than earliest, "
                            "where the stream's group start starts it", "commit an offset for every partition "
                            "before the switch, or remove the override")
            elif key == "consumer.override.isolation.level" and value.lower() == "read_uncommitted":
                self.note("the connector reads uncommitted transactions; streamfill reads read_committed, so "
                          "records of aborted transactions do not land")
            elif setting not in ("group.id", "auto.offset.reset", "isolation.level"):
                self.note("the connector's consumer.override.*, producer.override.* and admin.override.* settings "
                          "are not copied: streamfill's Kafka client settings are STREAMFILL_KAFKA_* or the "
                          "entry's kafka_conn_id")
        for key, why in _FRAMEWORK_DROPPED.items():
            if self.get(key) is not None and why:
                self.note(f"{key}: {why}")

    def _sink_settings(self) -> None:
        """The rest of each sink's settings: notes for what streamfill does its own way, refusals for what it
        cannot do."""
        sink = self.sink
        for key, why in sink.dropped.items():
            if self.get(key) is not None and why:
                self.note(f"{key}: {why}")
        self.read |= {k for k in self.s if k.startswith(sink.dropped_prefixes)} if sink.dropped_prefixes else set()
        for setting in sink.time_zones:
            zone = self.get(setting)
            if zone is not None and zone not in UTC_NAMES:
                self.refuse(setting, zone, "writes times in another zone than UTC, and streamfill writes timestamptz "
                            "(a time without an offset is UTC)", "use UTC")
        if sink is SINKS[CONFLUENT]:
            date_zone = self.get("date.timezone")
            if date_zone not in (None, "DB_TIMEZONE", "UTC"):
                self.refuse("date.timezone", date_zone, "is not DB_TIMEZONE or UTC", "use UTC")
            if (self.get("timestamp.precision.mode") or "microseconds") != "microseconds":
                self.refuse("timestamp.precision.mode", self.get("timestamp.precision.mode"), "is not microseconds, "
                            "which timestamptz keeps", "use microseconds")
            if self.get("timestamp.fields.list"):
                self.refuse("timestamp.fields.list", self.get("timestamp.fields.list"), "turns numbers or text into "
                            "timestamps, which an entry's column types say", "remove it and give those columns type "
                            "timestamp by hand")
            types = {t.strip().upper() for t in (self.get("table.types") or "TABLE").split(",")}
            if "VIEW" in types:
                self.refuse("table.types", self.get("table.types"), "writes into views, and streamfill writes "
                            "tables", "use TABLE")
            self.get("auto.evolve")
            creates = "auto.create" if (self.get("auto.create") or "false").lower() == "false" else None
        else:
            evolution = (self.get("schema.evolution") or "none").lower()
            creates = None if evolution == "basic" else "schema.evolution"
            column_naming = self.get("column.naming.strategy")
            if column_naming not in (None, *_COLUMN_NAMING):
                self.refuse("column.naming.strategy", column_naming, "names columns by a class of its own",
                            "remove it and name the columns in the entry by hand")
            self.get("collection.naming.strategy")
            self.get("table.naming.strategy")
        if creates:
            self.note(f"{creates}={self.s.get(creates) or 'its default'}: the connector needs the table to exist; "
                      "streamfill creates a missing one from the entry")
        self.note("streamfill adds a column only when the entry names it (or its registry subject gains it), never "
                  "for a field a record brings, as Connect's auto.evolve and schema.evolution=basic do")
        if self.unquoted:
            self.note("the connector does not quote names, so PostgreSQL folds them to lower case: the entry's "
                      "table is lower case too")

    def _unknown(self) -> None:
        for key in sorted(set(self.s) - self.read):
            if key in _FRAMEWORK_DROPPED or key in self.sink.dropped:
                continue
            self.refuse(key, self.s[key], f"is no setting of {self.sink.label} that from-connect knows", "remove it "
                        "if it does not change what lands, or write the entry by hand (docs/pipelines.md)")

    # ---- where rows go, and their columns

    def _tables(self, topics: tuple[str, ...], pattern: str | None,
                schema: str | None) -> list[tuple[str | None, str]]:
        """(topic, table) per entry: one per topic when the table's name follows the topic, else one."""
        sink = self.sink
        setting = next((s for s in sink.table_formats if self.s.get(s)), sink.table_formats[0])
        fmt = self.get(setting) or TOPIC
        for alias in sink.table_formats:
            self.read.add(alias)
        strategy = self.s.get("collection.naming.strategy") or self.s.get("table.naming.strategy")
        passthrough = sink is SINKS[CONFLUENT] or _NAMING.get(strategy or "", False)
        if sink is SINKS[DEBEZIUM] and strategy is not None and strategy not in _NAMING:
            self.refuse("collection.naming.strategy", strategy, "names tables by a class of its own",
                        "remove it and give the entry's table by hand")
        others = sorted(set(re.findall(r"\$\{[^}]*\}", fmt)) - {TOPIC})
        if others:
            self.refuse(setting, fmt, f"names tables by {', '.join(others)}, a table per source table, and an entry "
                        "writes one table", "give each source table's topic a configuration (or an entry) of its own, "
                        "with its table's name")
            return []
        if TOPIC in fmt and pattern is not None:
            self.refuse(setting, fmt, "gives each topic topics.regex matches a table of its own, and an entry with a "
                        "topic_pattern writes one table", "list the topics, or give the table's name")
            return []
        unquoted = self.unquoted
        out = []
        for topic in (topics if TOPIC in fmt else (None,)):
            routed = self.transforms.routed(topic) if topic is not None else ""
            name = fmt.replace(TOPIC, routed if passthrough else routed.replace(".", "_"))
            name = name.lower() if unquoted else name
            parts = name.split(".")
            if len(parts) == 1 and schema:
                name = f"{schema}.{name}"
            try:
                parse_table(name, setting)
            except OptionError as exc:
                self.refuse(setting, fmt, f"gives the table {name!r}" + (f" for topic {topic}" if topic else "")
                            + f", which {exc.problem}", "give table.name.format a name of 1 to 63 characters, or "
                            "schema.name")
                continue
            out.append((topic, name))
        if TOPIC in fmt or not out:
            return out
        return [(topics[0] if len(topics) == 1 else None, out[0][1])]  # one table for every topic

    def _columns(self, source: ColumnSource, table: str, key_mode: str, fields: tuple[str, ...],
                 wrapped: bool) -> tuple[dict[str, dict], tuple[str, ...]]:
        """(columns, key) of one entry."""
        existing = None
        if source == TABLE:
            existing = self.tables(table) if self.tables is not None else None
            if existing is None:
                self.refuse("--columns-from-table", table, "is no table of the database read", "give --database-url "
                            "of the database the connector writes, or leave the flag out")
                return {}, ()
        business = key_mode in ("record_key", "record_value")
        if business and not fields:
            if existing is not None and existing.primary_key:
                fields = existing.primary_key
                self.note(f"{self.sink.pk_fields} is not set: the key is table {table}'s primary key "
                          f"({', '.join(fields)})")
            else:
                self.refuse(self.sink.pk_fields, None, f"is not set, so with {self.sink.pk_mode}={key_mode} the key "
                            "is every field of the record's " + ("key" if key_mode == "record_key" else "value")
                            + ", which the configuration does not show", f"add {self.sink.pk_fields}, or give "
                            "--columns-from-table with the table the connector wrote (its primary key)")
                return {}, ()
        mongodb = self.transforms.unwrap is not None and self.transforms.unwrap.mongodb
        key = tuple(f.lower() if self.unquoted else f for f in fields) if business else ()
        for name, field in zip(key, fields, strict=True):
            if not COLUMN_NAME.fullmatch(name) or name in RESERVED:
                self.refuse(self.sink.pk_fields, ",".join(fields), f"names field {field!r}, which is no column "
                            "name an entry takes (letters, digits and _, not one of streamfill's own)",
                            "write the entry by hand, reading it with field:")
        if source == REGISTRY:
            for key_setting in ("fields.whitelist", "field.include.list", "field.exclude.list"):
                if self.get(key_setting):
                    self.refuse(key_setting, self.get(key_setting), "keeps some of the value's fields, and the "
                                "registry's subject gives them all", "use --columns-from-table, or declare the "
                                "columns by hand")
            return {}, key
        if source == KEYS:
            if not key:
                self.refuse(self.sink.pk_mode, key_mode if self.s.get(self.sink.pk_mode) else f"{key_mode} (default)",
                            "names no key field, so the entry would have no column "
                            "(the connector takes its columns from each record's schema, which the configuration "
                            "does not show)", "give --columns-from-table (the table the connector wrote) or "
                            "--columns-from-registry")
                return {}, ()
            return {name: self._column("string", field, name, mongodb, wrapped) for name, field in
                    zip(key, fields, strict=True)}, key
        columns: dict[str, dict] = {}
        kept = self._kept()
        skipped = [c.name for c in existing.columns if c.name in CONNECT_COORDINATES or c.name in RESERVED]
        if skipped:
            self.note(f"table {table}'s column(s) {', '.join(skipped)} are Kafka's coordinates, Connect's or "
                      "streamfill's, not columns of the entry")
        for column in existing.columns:
            if column.name in skipped or not (kept(column.name) or column.name in key):
                continue
            kind = column.entry_type
            if kind is None:
                self.refuse("--columns-from-table", f"{table}.{column.name} {column.pg_type}", "is a column no entry "
                            "type writes unchanged", column.fix(table))
                continue
            if not COLUMN_NAME.fullmatch(column.name):
                self.refuse("--columns-from-table", f"{table}.{column.name}", "is no column name an entry takes "
                            "(letters, digits and _)", "rename the column, or write the entry by hand")
                continue
            if wrapped and kind.split("(")[0] in _CONNECT_JSON_ENCODED:
                self.refuse("--columns-from-table", f"{table}.{column.name} {column.pg_type}", "is read from "
                            f"JsonConverter's payload, which writes {_CONNECT_JSON_ENCODED[kind.split('(')[0]]}, and "
                            "format json reads the field's text", "use the Avro converter (or Debezium's events), or "
                            "declare the column by hand")
                continue
            columns[column.name] = self._column(kind, column.name, column.name, mongodb, wrapped,
                                                required=column.not_null and column.name not in key)
        missing = [k for k in key if k not in columns]
        if missing and not any(e.option == "--columns-from-table" for e in self.errors):
            self.refuse(self.sink.pk_fields, ",".join(fields), f"names {', '.join(missing)}, no column of table "
                        f"{table}", "name the table's key columns")
        return columns, key

    def _column(self, kind: str, field: str, name: str, mongodb: bool, wrapped: bool,
                required: bool = False) -> dict:
        if mongodb and field == "id":
            field = "_id"  # MongoDB's unwrap names the document's _id id in the key; the value keeps _id
        if wrapped:
            field = f"{PAYLOAD}.{field}"
        column: dict = {"type": kind}
        if required:
            column["required"] = True
        if field != name:
            column["field"] = field
        return column

    def _kept(self) -> Callable[[str], bool]:
        """Whether the connector writes a value field: fields.whitelist (Confluent's), field.include.list less
        field.exclude.list (Debezium's); every field when none is set."""
        listed = self.get("fields.whitelist") or self.get("field.include.list")
        excluded = self.get("field.exclude.list")
        for setting in ("field.include.list", "field.exclude.list"):
            if ":" in (self.s.get(setting) or ""):
                self.refuse(setting, self.s[setting], "names fields per topic (topic:field)", "write the entries by "
                            "hand")
        include = None if listed is None else {f.strip() for f in listed.split(",") if f.strip()}
        exclude = {f.strip() for f in (excluded or "").split(",") if f.strip()}
        return lambda name: (include is None or name in include) and name not in exclude


def _same_database(connector: tuple[str, int, str | None], ours: tuple[str, int, str] | None) -> bool:
    if ours is None or connector[2] is None:
        return False
    local = connector[0] in _LOCAL_HOSTS and ours[0] in _LOCAL_HOSTS
    return (local or connector[0] == ours[0]) and connector[1] == ours[1] and connector[2] == ours[2]


def _conn_id(database: str) -> str:
    """An Airflow connection id for the connector's database (letters, digits, _, . and -)."""
    conn_id = "postgres_" + re.sub(r"[^A-Za-z0-9_.-]", "_", database)
    return conn_id if re.fullmatch(CONN_ID, conn_id) else "postgres_connect"

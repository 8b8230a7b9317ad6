"""A Debezium change event read in the read's Python tasks (docs/pipelines.md, "Change data capture"): what its
row is, whether it deletes, its position in the source's log, and why it cannot be applied. The parse
(spark_jobs.pipelines.envelope) then reads the row's columns as it reads any JSON value, so every type, rule and
dead letter works unchanged.

- The event as Kafka Connect wrote it: JSON with its schema (JsonConverter's {schema, payload}), JSON without
  (schemas.enable=false), or Avro through a registry. Each field a column reads is turned into its plain value
  by its semantic type (connect_types): from the event's schema, the Avro schema's `connect.name`, or, without a
  schema, the column's declared type and the entry's `debezium:` settings (debezium_settings).
- Its row: `after` for op c, r and u; `before` for op d, or, when a delete has no `before` (MongoDB without
  pre-images), the Kafka key. MongoDB's rows are Extended JSON text (mongo_json), its key's `id` the `_id`.
- Its position: the entry's `position:` path, in the row image of the op when it starts with `before.` or
  `after.`; without one, the path of the event's connector (debezium.POSITIONS). SQL Server's LSN text
  (00000027:00000758:0005) is the number its hex parts write.
- A tombstone's key is made plain the same way, so deletes by the Kafka key read it like a delete's `before`.

Pure: change_batches applies it in the read's tasks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from streamfill.spark_jobs.pipelines import debezium, mongo_json
from streamfill.spark_jobs.pipelines.connect_types import (
    Converter,
    Undecodable,
    fields_of_connect,
    full_name,
    of_avro,
    of_connect,
    plain,
)
from streamfill.spark_jobs.pipelines.debezium_settings import DebeziumSettings, without_schema

if TYPE_CHECKING:  # reader_of reads an entry; the read's tasks import this module without it
    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

# the columns the read's tasks add beside Kafka's
DOCUMENT = "_event_document"  # the row's JSON (binary), null when the event cannot be applied
DELETES = "_event_delete"  # op d
POSITION = "_event_position"  # the position's text, a whole number
ERROR = "_event_error"  # why the event cannot be applied
KEY_SOURCE = "_event_key_source"  # where a delete's key came from, as its reasons name it
BEFORE_OF_DELETE = f"{debezium.ROW_BEFORE} of op {debezium.DELETE}"
KEY_OF_DELETE = f"Kafka key of op {debezium.DELETE}"

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])  # an object's fields, each left as its JSON text
_VALUE = msgspec.json.Decoder(float_hook=Decimal)  # a value, its numbers exact
ENCODE = msgspec.json.Encoder(decimal_format="number").encode  # numbers as exact as they came
_SQL_SERVER_LSN = re.compile(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{8}:[0-9a-fA-F]{4}")
_NULL = msgspec.Raw(b"null")
_PLANS = 64  # schemas a reader keeps the plans of (a topic's events share a few)


@dataclass(frozen=True)
class RowField:
    """A top-level field of the row the entry reads: the column its reasons name, the declared type when the
    column reads the field itself (an event without a schema is read by it), the semantic type the entry names."""

    column: str
    kind: str | None = None
    scale: int | None = None
    semantic: str | None = None


class Result(NamedTuple):
    """What one record of a Debezium entry says: its row's JSON, whether it deletes, its position, why it cannot
    be applied, where a delete's key came from."""

    document: bytes | None = None
    deletes: bool = False
    position: str | None = None
    error: str | None = None
    key_source: str | None = None


@dataclass(frozen=True)
class EventReader:
    """How an entry reads its events: built on the driver from the entry, sent to the read's tasks."""

    upserts: tuple[tuple[str, RowField], ...]  # the fields op c, r and u read
    keys: tuple[tuple[str, RowField], ...]  # the fields a delete reads (the key columns')
    position: str | None  # the entry's `position:` (None: by connector)
    decimal_mode: str = "precise"  # the entry's debezium: settings, for fields no schema describes
    time_mode: str = "adaptive"
    mongo_id: bool = False  # a key column reads MongoDB's `_id`: a key's `id` is its Extended JSON text
    row_position: bool = False  # the position is a field of the row image (`after.version`)
    # (kind, schema) -> plans, made in the task that reads with them
    _plans: dict = field(default_factory=dict, compare=False, repr=False)

    def _planned(self, key: Hashable, build) -> object:
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) >= _PLANS:
                self._plans.clear()
            found = self._plans[key] = build()
        return found

    @property
    def top_fields(self) -> frozenset[str]:
        """The fields of an event its envelope may have at the top (so it is no {schema, payload} wrapper)."""
        path = self.position
        first = path.split(".")[0] if path and path != debezium.NO_POSITION else "source"
        return frozenset({*debezium.ROW_FIELDS, first})

    # -------------------------------------------------------------------------------------------- the event

    def read(self, value: bytes, key: bytes | None) -> Result:
        """One JSON change event (with or without JsonConverter's wrapper)."""
        fast = self._planned("fast", self._fast_decoder)
        if fast:
            try:
                return self._read_fast(value, key, fast)
            except (msgspec.DecodeError, msgspec.ValidationError, _Unusual):
                pass
        top = _object(value)
        if top is None:
            return Result(error="invalid JSON")
        schema = None
        if _wrapped(top, self.top_fields):
            payload = _object(top[debezium.WRAPPED])
            if payload is None:
                return Result(error="invalid JSON")
            schema, top = top[debezium.WRAPPER], payload
        plans = self._planned(("connect", _bytes(schema)), lambda: self._plans_of_connect(schema))
        return self._event(top, key, plans)

    def read_datum(self, datum: object, schema_key: Hashable, schema: object, named: Mapping,
                   key: bytes | None) -> Result:
        """One change event fastavro decoded, with its (writer or reader) Avro schema."""
        if not isinstance(datum, dict):
            return Result(error="invalid JSON")
        plans = self._planned(("avro", schema_key), lambda: self._plans_of_avro(schema, named))
        return self._event(datum, key, plans, avro=True)

    def _event(self, event: dict, key: bytes | None, plans: tuple[dict, dict], avro: bool = False) -> Result:
        op = _text(event.get(debezium.OP))
        if op is None:
            return Result(error=f"not a Debezium change event: it has no {debezium.OP}")
        if op not in debezium.OPS:
            return Result(error=f"unknown Debezium op {_shown(op)}; streamfill applies {', '.join(debezium.OPS)}")
        deletes = op == debezium.DELETE
        raw = event.get(debezium.ROW_BEFORE if deletes else debezium.ROW_AFTER)
        source = BEFORE_OF_DELETE if deletes else None
        if _is_null(raw):
            if deletes and key is not None:
                raw, source = self.key_document(key, as_object=True), KEY_OF_DELETE
            if _is_null(raw):
                if not deletes:
                    mongodb = _text(_at(event, debezium.CONNECTOR)) == debezium.MONGODB
                    hint = ("; MongoDB's connector sends the document of an update with capture.mode "
                            "change_streams_update_full" if mongodb else "")
                    return Result(error=f"op {op} has no {debezium.ROW_AFTER}{hint}")
                return Result(deletes=True, error=f"op {debezium.DELETE} has no {debezium.ROW_BEFORE}: the row to "
                                                  "delete is unknown")
        plan = plans[1] if deletes else plans[0]
        if not plan and not self.row_position and isinstance(raw, msgspec.Raw) and memoryview(raw)[:1] == b"{":
            row, error, document = None, None, bytes(raw)  # nothing to convert: the row's JSON as it came
        else:
            row, error = self._row(raw, plan, source)
            if isinstance(row, dict):  # Avro's decimals, bytes and times as the JSON path writes them
                document = ENCODE(plain(row) if avro else row)
            else:
                document = raw if isinstance(raw, bytes) else _raw_text(raw)
        position, position_error = self._position(event, row)
        return Result(document, deletes, position, position_error or error, source)

    def _row(self, raw: object, plan: Mapping[str, Converter], source: str | None) -> tuple[object, str | None]:
        """The row image as a dict of plain values (its fields the plan converts) and why a field does not
        decode; a row that is no JSON object stays as it is (the parse says it is no JSON)."""
        row = _object(raw)
        if row is None and isinstance(_value(raw), str):  # MongoDB: the document as Extended JSON text
            document = _object(_value(raw).encode())
            if document is None:
                return raw, None
            return {k: mongo_json.plain(_value(v)) for k, v in document.items()}, None
        if row is None:
            return raw, None
        for name, convert in plan.items():
            if name in row and not _is_null(row[name]):
                try:
                    row[name] = convert(_value(row[name]))
                except Undecodable as exc:
                    reason = exc.reason(dict(self.keys if source else self.upserts)[name].column)
                    return row, f"{source}: {reason}" if source else reason
        return row, None

    def _position(self, event: dict, row: object) -> tuple[str | None, str | None]:
        path = self.position
        if path is None:  # by the event's connector
            source = _object(event.get("source"))
            path = debezium.default_position(_text(source.get("connector")) if source is not None else None)
            found = _at(source, path.partition(".")[2]) if path is not None and path.startswith("source.") \
                else _at(event, path) if path is not None else None
        elif path == debezium.NO_POSITION:
            return None, None
        elif self.row_position:  # the row image of the op: before of d, else after
            rest = path.partition(".")[2]
            found = _at(row, rest) if rest and isinstance(row, dict) else None
        else:
            found = _at(event, path)
        if path is None:
            return None, None
        return _position_of(path, found)

    # -------------------------------------------------------------------------------------------- fast path

    def _fast_decoder(self) -> tuple | bool:
        """A decoder of the usual event into the few fields the reader needs (the envelope's and the source's
        position fields), rather than every field as JSON text, and the names of the source's fields in it;
        False where the position is no field of `source` or of the row. An event it cannot read (an op that is
        no text, a missing row, ...) goes the general way, which says what is wrong."""
        path = self.position or debezium.DEFAULT_POSITION
        first, _, rest = path.partition(".")
        if path != debezium.NO_POSITION and not self.row_position and (first != "source" or "." in rest):
            return False
        names = sorted({p.partition(".")[2] for p in (*debezium.POSITIONS.values(), debezium.DEFAULT_POSITION) if p}
                       | ({rest} if first == "source" else set()))
        attributes = [f"f{n}" for n in range(len(names))]
        source = msgspec.defstruct("Source", [("connector", str | None, None),
                                              *((a, msgspec.Raw, None) for a in attributes)],
                                   rename=dict(zip(attributes, names, strict=True)))
        envelope = msgspec.defstruct("Envelope", [("op", str | None, None), ("before", msgspec.Raw, None),
                                                  ("after", msgspec.Raw, None), ("source", source | None, None),
                                                  ("schema", msgspec.Raw, None), ("payload", msgspec.Raw, None)])
        return msgspec.json.Decoder(envelope), dict(zip(names, attributes, strict=True))

    def _read_fast(self, value: bytes, key: bytes | None, fast: tuple) -> Result:
        decoder, attributes = fast
        event = decoder.decode(value)
        schema = None
        if event.op is None and event.source is None and _is_null(event.before) and _is_null(event.after) and \
                not _is_null(event.schema) and not _is_null(event.payload):  # JsonConverter's wrapper
            schema, event = event.schema, decoder.decode(event.payload)
        deletes = event.op == debezium.DELETE
        raw = event.before if deletes else event.after
        if event.op not in debezium.OPS or _is_null(raw) or memoryview(raw)[:1] != b"{":
            raise _Unusual
        plans = self._planned(("connect", _bytes(schema)), lambda: self._plans_of_connect(schema))
        plan = plans[1] if deletes else plans[0]
        source = BEFORE_OF_DELETE if deletes else None
        row, error, document = None, None, bytes(raw)  # nothing to convert: the row's JSON as it came
        if plan or self.row_position:
            row, error = self._row(raw, plan, source)
            document = ENCODE(row)
        path = self.position
        if path is None:
            path = debezium.default_position(event.source.connector if event.source is not None else None)
        if path is None or path == debezium.NO_POSITION:
            return Result(document, deletes, None, error, source)
        rest = path.partition(".")[2]
        if self.row_position:
            found = _at(row, rest)
        else:
            found = getattr(event.source, attributes[rest]) if event.source is not None else None
        position, position_error = _position_of(path, found)
        return Result(document, deletes, position, position_error or error, source)

    # -------------------------------------------------------------------------------------------- the key

    def key_document(self, key: bytes, as_object: bool = False) -> bytes | None:
        """A Kafka key made plain: JsonConverter's payload, its fields by their semantic types, MongoDB's `id` as
        the document's `_id`. None for a key that is no JSON object (the parse reads it as text) unless its
        payload is a scalar, whose JSON is kept (not `as_object`: a delete's row must be an object)."""
        top = _object(key)
        if top is None:
            return None
        schema, row = None, top
        if _wrapped(top, frozenset(name.split(".")[0] for name, _ in self.keys)):
            schema, payload = top[debezium.WRAPPER], top[debezium.WRAPPED]
            row = _object(payload)
            if row is None:
                return None if as_object else _raw_text(payload)
        if self.mongo_id and debezium.MONGODB_ID not in row and isinstance(_value(row.get(debezium.MONGODB_KEY_ID)),
                                                                             str):
            text = _value(row[debezium.MONGODB_KEY_ID])
            try:
                row = {debezium.MONGODB_ID: mongo_json.plain(_VALUE.decode(text.encode()))}
            except msgspec.DecodeError:
                row = {debezium.MONGODB_ID: text}
        else:
            plan = self._planned(("key", _bytes(schema)), lambda: self._key_plan(schema))
            for name, convert in plan.items():
                if name in row and not _is_null(row[name]):
                    try:
                        row[name] = convert(_value(row[name]))
                    except Undecodable:
                        return None  # the key stays as it came; the parse names the column it cannot read
        return ENCODE(row)

    # -------------------------------------------------------------------------------------------- the plans

    def _plans_of_connect(self, schema: object) -> tuple[dict, dict]:
        """(upserts, deletes): field -> converter, by the row's schema in the envelope's schema, the settings
        for a field it does not describe."""
        described = {}
        if schema is not None:
            envelope = fields_of_connect(_value(schema))
            row_schema = envelope.get(debezium.ROW_AFTER) or envelope.get(debezium.ROW_BEFORE)
            described = {name: of_connect(f) for name, f in fields_of_connect(row_schema).items()}
        return self._plan(self.upserts, described), self._plan(self.keys, described)

    def _plans_of_avro(self, schema: object, named: Mapping) -> tuple[dict, dict]:
        described = {}
        fields = schema.get("fields") if isinstance(schema, Mapping) else None
        after = next((f.get("type") for f in fields or () if f.get("name") == debezium.ROW_AFTER), None)
        branches = [t for t in (after if isinstance(after, list) else [after]) if t != "null"]
        record = named.get(branches[0], branches[0]) if len(branches) == 1 and isinstance(branches[0], str) \
            else branches[0] if branches else None
        if isinstance(record, Mapping):
            described = {f["name"]: of_avro(f.get("type"), named) for f in record.get("fields") or ()}
        return self._plan(self.upserts, described), self._plan(self.keys, described)

    def _key_plan(self, schema: object) -> dict:
        described = {}
        if schema is not None:
            described = {name: of_connect(f) for name, f in fields_of_connect(_value(schema)).items()}
        return self._plan(self.keys, described)

    def _plan(self, fields: tuple[tuple[str, RowField], ...], described: Mapping[str, Converter | None]) -> dict:
        out = {}
        for name, f in fields:
            convert = described[name] if name in described else self._without_schema(f)
            if convert is not None:
                out[name] = convert
        return out

    def _without_schema(self, f: RowField) -> Converter | None:
        """How a field no schema describes reads: the semantic type the entry names, else by the column's
        declared type and the connector's modes."""
        return without_schema(f.kind, f.scale, f.semantic, self.decimal_mode, self.time_mode)


NO_EVENT = Result()  # a tombstone, or a value that did not decode: nothing of an event


class _Unusual(Exception):
    """An event the fast path leaves to the general one."""


def _position_of(path: str, found: object) -> tuple[str | None, str | None]:
    """(the position's text, None) or (None, why the event has no position)."""
    text = _text(found)
    if text is None:
        return None, (f"the change event has no {path}; set position: to the field that orders the connector's "
                      f"changes, or position: {debezium.NO_POSITION}")
    if ":" in text and _SQL_SERVER_LSN.fullmatch(text):
        text = str(int(text.replace(":", ""), 16))
    if not (text.isascii() and text.isdigit() and len(text) <= 38):
        return None, f"{path} is not a position (a whole number of at most 38 digits): {_shown(text)}"
    return text, None


# ------------------------------------------------------------------------------------------------ JSON helpers


def _object(raw: object) -> dict | None:
    """A JSON object's fields (their JSON text) from bytes or a Raw; a dict as it is; None for anything else.
    Text msgspec refuses (NaN, Infinity) is read by Python's json, as Spark reads it."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, (bytes, msgspec.Raw)) or _is_null(raw):
        return None
    try:
        return _OBJECT.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        try:
            out = json.loads(bytes(raw), parse_float=Decimal, parse_constant=lambda c: msgspec.Raw(c.encode()))
        except (ValueError, UnicodeDecodeError):
            return None
        return out if isinstance(out, dict) else None


def _value(raw: object) -> object:
    return _VALUE.decode(raw) if isinstance(raw, msgspec.Raw) else raw


def _is_null(raw: object) -> bool:
    return raw is None or raw == _NULL  # msgspec's Raw holds a value without the spaces around it


def _bytes(raw: object) -> bytes | None:
    return bytes(raw) if isinstance(raw, msgspec.Raw) else None


def _raw_text(raw: object) -> bytes:
    return bytes(raw) if isinstance(raw, msgspec.Raw) else ENCODE(plain(raw))


def _text(raw: object) -> str | None:
    """A field as Spark reads it into text: a string its value, anything else its JSON; null is None."""
    if _is_null(raw):
        return None
    if isinstance(raw, msgspec.Raw):
        text = bytes(raw)
        return _VALUE.decode(text) if text[:1] == b'"' else text.decode()
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return ENCODE(plain(raw)).decode()


def _at(value: object, path: str) -> object:
    """The value at a dotted path into an object (None when it is not there)."""
    for name in path.split("."):
        value = _object(value)
        if value is None:
            return None
        value = value.get(name)
    return value


def _wrapped(top: dict, fields: frozenset[str]) -> bool:
    """Kafka Connect's {schema, payload} (JsonConverter with schemas.enable): both set, none of the fields an
    unwrapped object is read by."""
    if _is_null(top.get(debezium.WRAPPER)) or _is_null(top.get(debezium.WRAPPED)):
        return False
    return all(_is_null(top.get(f)) for f in fields - {debezium.WRAPPER, debezium.WRAPPED})


def _shown(text: str) -> str:
    return text.replace("\0", "\ufffd")[:200]


# ------------------------------------------------------------------------------------------------ the entry


def reader_of(spec: PipelineSpec) -> EventReader:
    """The entry's reader: each top-level field its columns read, the key columns' apart."""
    settings = spec.debezium or DebeziumSettings()

    def fields(names) -> tuple[tuple[str, RowField], ...]:
        out: dict[str, RowField] = {}
        for name in names:
            c = spec.columns[name]
            path = c.field or name
            top = path.split(".")[0]
            if top not in out:
                kind = c.column_type if "." not in path else None
                semantic = settings.semantic_type(name)
                out[top] = RowField(name, kind.name if kind else None, kind.scale if kind else None,
                                 full_name(semantic) if semantic else None)
        return tuple(out.items())

    # a delete reads its key, and its version column when the entry has one (it orders the delete between
    # partitions)
    keys = [k for k in (*spec.key, *([spec.version_column] if spec.version_column else [])) if k in spec.columns]
    upserts, deletes = fields(spec.columns), fields(keys)
    position = spec.position
    first, _, rest = (position or "").partition(".")
    if first in (debezium.ROW_BEFORE, debezium.ROW_AFTER) and rest:  # the position's field decoded with the row
        row_field = rest.split(".")[0]
        upserts = upserts if row_field in dict(upserts) else (*upserts, (row_field, RowField(position)))
        deletes = deletes if row_field in dict(deletes) else (*deletes, (row_field, RowField(position)))
    mongo_id = any((spec.columns[k].field or k).split(".")[0] == debezium.MONGODB_ID for k in keys)
    return EventReader(upserts, deletes, position, settings.decimal_handling_mode, settings.time_precision_mode,
                       mongo_id, row_position=first in (debezium.ROW_BEFORE, debezium.ROW_AFTER))

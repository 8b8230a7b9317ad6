"""Kafka Connect's and Debezium's semantic types: a field schema's `name` says how its value is written (a decimal
as the base64 of its unscaled bytes, a timestamp as microseconds since the epoch, JSON as text, ...). Each becomes
the plain value the parse reads (docs/pipelines.md, "Change data capture"): a decimal as its exact text, a date,
time or timestamp as ISO text (Z for UTC), JSON as itself, bits as a bit string, a geometry's WKB as hex. Read
from a JsonConverter event's schema, an Avro schema's `connect.name` (Confluent's AvroConverter keeps it), or, for
an event without a schema, named by the entry (debezium_settings). Pure: no Spark.

A converter takes the value as JSON decodes it (numbers exact, bytes as base64 text) or as fastavro decodes it
(bytes, Decimal, date, datetime), and raises `Undecodable` naming the type and the problem.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

import msgspec

Converter = Callable[[object], object]

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_EPOCH = date(1970, 1, 1)
_DAY_NS = 86_400 * 10**9


class Undecodable(ValueError):
    """A value its semantic type cannot read: `what` (the type, with its parameters), the value, the problem."""

    def __init__(self, what: str, value: object, problem: str) -> None:
        super().__init__(f"({what}) cannot be decoded: {_shown(value)} {problem}")
        self.what, self.value, self.problem = what, value, problem

    def reason(self, column: str) -> str:
        """The dead letter's reason for `column`."""
        return f"{column} {self}"


def _shown(value: object) -> str:
    """A value as a reason shows it: text as it is, a number as written, bytes as base64, anything else its JSON."""
    if isinstance(value, (bytes, bytearray)):
        value = base64.b64encode(value).decode()
    elif isinstance(value, Decimal):
        value = format(value, "f")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    text = value if isinstance(value, str) else msgspec.json.encode(plain(value)).decode()
    return text.replace("\0", "\ufffd")[:200]


def plain(value: object) -> object:
    """A decoded value made JSON-encodable: fastavro's Decimal, bytes and times as the parse reads them."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return _timestamp_text(value)
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------------ the values


def _bytes(what: str, value: object) -> bytes:
    """Connect's bytes: base64 text in JSON, bytes from Avro."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise Undecodable(what, value, "is not base64") from None
    raise Undecodable(what, value, "is not base64 text")


def _whole(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)) or value != int(value):
        raise Undecodable(what, value, "is not a whole number")
    return int(value)


def _decimal_text(unscaled: int, scale: int) -> str:
    return format(Decimal(unscaled).scaleb(-scale), "f")


def _scale(what: str, value: object, parameters: Mapping[str, object], given: int | None = None) -> int:
    if given is not None:
        return given
    try:
        return int(parameters["scale"])
    except (KeyError, TypeError, ValueError):
        raise Undecodable(what, value, "has no scale in its schema's parameters") from None


def decimal_of(scale: int | None, parameters: Mapping[str, object] | None = None) -> Converter:
    """org.apache.kafka.connect.data.Decimal: the big-endian two's complement of the unscaled value (base64 in
    JSON), or a number (JsonConverter's decimal.format=NUMERIC; fastavro's Decimal)."""
    parameters = parameters or {}
    known = scale if scale is not None else parameters.get("scale")
    what = CONNECT_DECIMAL if known is None else f"{CONNECT_DECIMAL}, scale {known}"

    def convert(value: object) -> object:
        if isinstance(value, Decimal):
            return format(value, "f")
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raw = _bytes(what, value)
        if not raw:
            raise Undecodable(what, value, "has no bytes")
        return _decimal_text(int.from_bytes(raw, "big", signed=True), _scale(what, value, parameters, scale))

    return convert


def _variable_scale_decimal(value: object) -> object:
    """io.debezium.data.VariableScaleDecimal: {scale, value} (NUMERIC without a scale)."""
    what = VARIABLE_SCALE_DECIMAL
    if isinstance(value, Decimal):
        return format(value, "f")
    if not isinstance(value, Mapping) or "scale" not in value or "value" not in value:
        raise Undecodable(what, value, "is not a struct of scale and value")
    raw = _bytes(what, value["value"])
    if not raw:
        raise Undecodable(what, value, "has no bytes")
    return _decimal_text(int.from_bytes(raw, "big", signed=True), _whole(what, value["scale"]))


def _date_text(what: str, value: object, days: int) -> str:
    try:
        return (_EPOCH + timedelta(days=days)).isoformat()
    except OverflowError:
        raise Undecodable(what, value, "is outside the dates 0001-01-01 to 9999-12-31") from None


def _days(what: str) -> Converter:
    def convert(value: object) -> object:
        if isinstance(value, date):
            return value.isoformat()
        return _date_text(what, value, _whole(what, value))
    return convert


def _clock(ns: int) -> str:
    """HH:MM:SS with as many fractional digits as it has (trailing zeros dropped)."""
    seconds, fraction = divmod(ns, 10**9)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    text = f"{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{fraction:09d}".rstrip("0") if fraction else text


def _time_of_day(what: str, ns_per_unit: int) -> Converter:
    def convert(value: object) -> object:
        if isinstance(value, time):
            return value.isoformat()
        ns = _whole(what, value) * ns_per_unit
        if not 0 <= ns <= _DAY_NS:
            raise Undecodable(what, value, "is not a time of day")
        return _clock(ns)
    return convert


def _timestamp_text(value: datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.isoformat() + "Z"


def _epoch(what: str, ns_per_unit: int) -> Converter:
    """Time since the epoch in a unit, written as UTC: Debezium's TIMESTAMP (no zone) is the source's wall clock
    as if in UTC, so it lands as that wall clock."""
    def convert(value: object) -> object:
        if isinstance(value, datetime):
            return _timestamp_text(value)
        ns = _whole(what, value) * ns_per_unit
        days, of_day = divmod(ns, _DAY_NS)
        return f"{_date_text(what, value, days)}T{_clock(of_day)}Z"
    return convert


def _as_is(value: object) -> object:
    return value


def _iso_date(value: object) -> object:
    """io.debezium.time.IsoDate writes 2017-09-15Z; a date has no zone to keep."""
    if isinstance(value, str) and value.endswith("Z"):
        return value[:-1]
    return value


def _json(value: object) -> object:
    """io.debezium.data.Json: the JSON text of a json or jsonb column, read as that JSON."""
    if not isinstance(value, str):
        return value
    try:
        return msgspec.json.decode(value.encode(), type=msgspec.Raw)
    except msgspec.DecodeError:
        raise Undecodable("io.debezium.data.Json", value, "is not JSON text") from None


def _bits(parameters: Mapping[str, object]) -> Converter:
    """io.debezium.data.Bits: the bits little-endian (Java's BitSet), `length` of them, as a bit string with the
    highest first, as the source writes BIT(n) ('101')."""
    what = "io.debezium.data.Bits"

    def convert(value: object) -> object:
        raw = _bytes(what, value)
        try:
            length = int(parameters.get("length", len(raw) * 8))
        except (TypeError, ValueError):
            length = len(raw) * 8
        number = int.from_bytes(raw, "little")
        if number.bit_length() > length:
            raise Undecodable(f"{what}, length {length}", value, f"has more than {length} bits")
        return format(number, f"0{length}b") if length else ""
    return convert


def _geometry(name: str) -> Converter:
    """io.debezium.data.geometry.*: a struct whose `wkb` (OGC Well-Known Binary) becomes hex text; srid and the
    other fields as they are (a circle's center is a point)."""
    def convert(value: object) -> object:
        if not isinstance(value, Mapping):
            raise Undecodable(name, value, "is not a struct")
        out = {}
        for k, v in value.items():
            if k == "wkb" and v is not None:
                v = _bytes(name, v).hex().upper()
            elif isinstance(v, Mapping) and "wkb" in v:
                v = convert(v)
            out[k] = v
        return out
    return convert


def _structured(name: str) -> Converter:
    """io.debezium.time.Structured*: calendar and clock fields; a special value (PostgreSQL's infinity) has no
    date or time to land as."""
    def convert(value: object) -> object:
        if not isinstance(value, Mapping):
            raise Undecodable(name, value, "is not a struct")
        if value.get("specialValue") is not None:
            raise Undecodable(name, value, f"is {value['specialValue']}, which a date or time column cannot hold")
        try:
            day = None
            if "year" in value:
                day = date(int(value["year"]), int(value["month"]), int(value["day"])).isoformat()
            clock = None
            if "hour" in value:
                ns = ((int(value["hour"]) * 60 + int(value["minute"])) * 60 + int(value["second"])) * 10**9
                clock = _clock(ns + int(value.get("nanos") or 0))
        except (KeyError, TypeError, ValueError):
            raise Undecodable(name, value, "has no valid calendar or clock fields") from None
        zone = ""
        if "offsetSeconds" in value and value["offsetSeconds"] is not None:
            sign, offset = ("-", -int(value["offsetSeconds"])) if int(value["offsetSeconds"]) < 0 else \
                ("+", int(value["offsetSeconds"]))
            zone = f"{sign}{offset // 3600:02d}:{offset % 3600 // 60:02d}"
        elif day is not None and clock is not None:
            zone = "Z"  # StructuredTimestamp: the source's wall clock, written as UTC like the epoch types
        if day is not None and clock is not None:
            return f"{day}T{clock}{zone}"
        return day if day is not None else f"{clock}{zone}"
    return convert


# name -> the converter for a field of that schema name, made from its schema parameters
_MS, _US, _NS = 10**6, 10**3, 1
SEMANTIC: dict[str, Callable[[Mapping[str, object]], Converter]] = {
    CONNECT_DECIMAL: lambda p: decimal_of(None, p),
    VARIABLE_SCALE_DECIMAL: lambda p: _variable_scale_decimal,
    "org.apache.kafka.connect.data.Date": lambda p: _days("org.apache.kafka.connect.data.Date"),
    "org.apache.kafka.connect.data.Time": lambda p: _time_of_day("org.apache.kafka.connect.data.Time", _MS),
    "org.apache.kafka.connect.data.Timestamp": lambda p: _epoch("org.apache.kafka.connect.data.Timestamp", _MS),
    "io.debezium.time.Date": lambda p: _days("io.debezium.time.Date"),
    "io.debezium.time.Time": lambda p: _time_of_day("io.debezium.time.Time", _MS),
    "io.debezium.time.MicroTime": lambda p: _time_of_day("io.debezium.time.MicroTime", _US),
    "io.debezium.time.NanoTime": lambda p: _time_of_day("io.debezium.time.NanoTime", _NS),
    "io.debezium.time.Timestamp": lambda p: _epoch("io.debezium.time.Timestamp", _MS),
    "io.debezium.time.MicroTimestamp": lambda p: _epoch("io.debezium.time.MicroTimestamp", _US),
    "io.debezium.time.NanoTimestamp": lambda p: _epoch("io.debezium.time.NanoTimestamp", _NS),
    "io.debezium.time.ZonedTimestamp": lambda p: _as_is,
    "io.debezium.time.ZonedTime": lambda p: _as_is,
    "io.debezium.time.IsoDate": lambda p: _iso_date,
    "io.debezium.time.IsoTime": lambda p: _as_is,
    "io.debezium.time.IsoTimestamp": lambda p: _as_is,
    "io.debezium.time.StructuredDate": lambda p: _structured("io.debezium.time.StructuredDate"),
    "io.debezium.time.StructuredTime": lambda p: _structured("io.debezium.time.StructuredTime"),
    "io.debezium.time.StructuredTimestamp": lambda p: _structured("io.debezium.time.StructuredTimestamp"),
    "io.debezium.time.StructuredZonedTime": lambda p: _structured("io.debezium.time.StructuredZonedTime"),
    "io.debezium.time.StructuredZonedTimestamp": lambda p: _structured("io.debezium.time.StructuredZonedTimestamp"),
    "io.debezium.data.Json": lambda p: _json,
    "io.debezium.data.Uuid": lambda p: _as_is,
    "io.debezium.data.Enum": lambda p: _as_is,
    "io.debezium.data.EnumSet": lambda p: _as_is,
    "io.debezium.data.Bits": _bits,
    "io.debezium.data.geometry.Geometry": lambda p: _geometry("io.debezium.data.geometry.Geometry"),
    "io.debezium.data.geometry.Geography": lambda p: _geometry("io.debezium.data.geometry.Geography"),
    "io.debezium.data.geometry.Point": lambda p: _geometry("io.debezium.data.geometry.Point"),
    "io.debezium.data.geometry.Circle": lambda p: _geometry("io.debezium.data.geometry.Circle"),
}


def _fits(name: str) -> frozenset[str]:
    """The column types a semantic type's value lands in; text takes every one."""
    short = name.rpartition(".")[2]
    if short.endswith("Decimal"):
        kinds: tuple[str, ...] = ("decimal", "double")
    elif short in ("Date", "IsoDate", "StructuredDate"):
        kinds = ("date",)
    elif short.endswith("Timestamp"):
        kinds = ("timestamp",)
    elif short == "Json":
        kinds = ("json", "struct", "array")
    elif ".geometry." in name:
        kinds = ("json", "struct")
    else:
        kinds = ()
    return frozenset({"string", *kinds})


FITS: dict[str, frozenset[str]] = {name: _fits(name) for name in SEMANTIC}
# a type's short name (MicroTimestamp); Date, Time and Timestamp are Debezium's, which read as Connect's do
SHORT_NAMES: dict[str, str] = {"Decimal": CONNECT_DECIMAL, **{
    name.rpartition(".")[2]: name for name in SEMANTIC if name.startswith("io.debezium.")}}


def column_type_of(name: object) -> str | None:
    """The column type a semantic type's value lands in, for columns taken from a registry's schema; None for
    Connect's Decimal (its Avro logical type gives precision and scale) and for names this module does not read."""
    if not isinstance(name, str) or name not in SEMANTIC or name == CONNECT_DECIMAL:
        return None
    fits = FITS[name]
    for kind in ("timestamp", "date", "json"):
        if kind in fits:
            return kind
    return "string"  # a time of day, bits, a UUID, an enum, a decimal of no fixed scale: their exact text


def full_name(name: str) -> str | None:
    """A semantic type's full schema name from its full or short name (MicroTimestamp); None if unknown."""
    return name if name in SEMANTIC else SHORT_NAMES.get(name)


# ------------------------------------------------------------------------------------------------ the schemas


def _nullable(convert: Converter) -> Converter:
    return lambda value: None if value is None else convert(value)


def _semantic(name: object, parameters: object) -> Converter | None:
    """The converter of a Connect semantic type by its name (Decimal, MicroTimestamp, ...); None for other names."""
    if not (isinstance(name, str) and name in SEMANTIC):
        return None
    return _nullable(SEMANTIC[name](parameters if isinstance(parameters, Mapping) else {}))


def of_connect(schema: object) -> Converter | None:
    """The converter of a value of a Kafka Connect JSON schema (JsonConverter's `schema`); None when its values
    are read as they are."""
    if not isinstance(schema, Mapping):
        return None
    semantic = _semantic(schema.get("name"), schema.get("parameters"))
    if semantic is not None:
        return semantic
    kind = schema.get("type")
    if kind == "struct":
        fields = {name: of_connect(field) for name, field in fields_of_connect(schema).items()}
        return _struct({k: c for k, c in fields.items() if c is not None})
    if kind == "array":
        return _array(of_connect(schema.get("items")))
    if kind == "map":
        return _map(of_connect(schema.get("keys")), of_connect(schema.get("values")))
    return None


def fields_of_connect(schema: object) -> dict[str, object]:
    """A Connect struct schema's fields by name (their schemas); empty for anything else."""
    if not isinstance(schema, Mapping) or schema.get("type") != "struct":
        return {}
    return {f["field"]: f for f in schema.get("fields") or ()
            if isinstance(f, Mapping) and isinstance(f.get("field"), str)}


def of_avro(schema: object, named: Mapping[str, object]) -> Converter | None:
    """The converter of a value fastavro decoded with this Avro schema (`named`: its named types by full and
    short name); None when its values are read as they are."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, list):  # a union: fastavro gives the value of its branch, without the branch
        branches = [t for t in schema if t != "null"]
        return of_avro(branches[0], named) if len(branches) == 1 else None
    if not isinstance(schema, Mapping):
        return None
    semantic = _semantic(schema.get("connect.name"), schema.get("connect.parameters"))
    if semantic is not None:
        return semantic
    kind = schema.get("type")
    if isinstance(kind, (Mapping, list)):
        return of_avro(kind, named)
    if kind == "record":
        fields = {f["name"]: of_avro(f.get("type"), named) for f in schema.get("fields") or ()
                  if isinstance(f, Mapping) and isinstance(f.get("name"), str)}
        return _struct({k: c for k, c in fields.items() if c is not None})
    if kind == "array":
        return _array(of_avro(schema.get("items"), named))
    if kind == "map":
        return _map(None, of_avro(schema.get("values"), named))
    return None


def _struct(fields: Mapping[str, Converter]) -> Converter | None:
    if not fields:
        return None

    def convert(value: object) -> object:
        if not isinstance(value, Mapping):
            return value
        return {k: (fields[k](v) if k in fields else v) for k, v in value.items()}
    return _nullable(convert)


def _array(item: Converter | None) -> Converter | None:
    if item is None:
        return None
    return _nullable(lambda value: [item(v) for v in value] if isinstance(value, list) else value)


def _map(keys: Converter | None, values: Converter | None) -> Converter | None:
    """A map: a JSON object with string keys, or JsonConverter's [[key, value], ...] for other keys."""
    if keys is None and values is None:
        return None
    keys, values = keys or _as_is, values or _as_is

    def convert(value: object) -> object:
        if isinstance(value, Mapping):
            return {k: values(v) for k, v in value.items()}
        if isinstance(value, list):
            return [[keys(p[0]), values(p[1])] if isinstance(p, list) and len(p) == 2 else p for p in value]
        return value
    return _nullable(convert)

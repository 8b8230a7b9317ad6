"""JSON values into typed columns inside the read, for the records whose typing is certain to be Spark's.

Spark's `from_json` and casts cost more CPU a record than msgspec and Arrow typing the same record in the Python
worker (bench/parse_stages.py). The reader types a record only where the result cannot
differ from Spark's parse (spark_jobs.pipelines.compile): a JSON object in strict JSON, valid UTF-8, each field
of the JSON type its column expects (a string for text, a date and a time; an integer for int and bigint; a
number for double and decimal; true or false for boolean) in a canonical form, and every rule the reader can
check passing. Such a record is `_parsed`; its typed values are in `_p_<column>`. Any other record (bad JSON, a
wrong type, a broken rule, a form Spark reads its own way) is left to Spark, which gives it its value or its
dead-letter reason exactly as before. Pure: no Spark import.

Where the two parsers could differ, the reader leaves the record to Spark:
- Spark reads a JSON number into its text through a double (`Double.toString`), so 1.0049999999999999999 is
  1.005 before a decimal cast: a decimal whose rounding a double's last digit could change is left to Spark;
- Jackson refuses a number of 1,000 digits or more and nesting 1,000 deep even in fields it skips;
- a key named like Spark's corrupt-record column (`reserved`) would fill that column;
- a time with more than 6 fractional digits, no zone, or an offset beyond 18:00 is read by Spark's own rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, localcontext
from operator import attrgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamfill.errors import OptionError
from streamfill.rules import KEYS, MEANINGS, BrokenWhen, Rule, as_mapping, rules_of

PARSED = "_parsed"  # true: the reader typed this record and every rule it checks passed
PREFIX = "_p_"  # the reader's typed value of column c is in _p_c
OPTION = "jsonColumns"
SCALARS = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
           "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC")}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
# the forms Spark's cast and Arrow's ISO-8601 parser read alike: zone Z or an offset up to 18:00
_TIMESTAMP = (r"^\d{4}-\d{2}-\d{2}[T ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
              r"(Z|[+-](0\d|1[0-7]):[0-5]\d|[+-]18:00)$")
_DATE = r"^\d{4}-\d{2}-\d{2}$"
# Jackson's StreamReadConstraints refuse a number of 1,000 digits (a float's integer, fraction and exponent digits
# together) and nesting 1,000 deep, even in fields Spark skips; and a key name of 50,000 characters
_LONG_NUMBER = re.compile(rb"[-+.eE0-9]{1000}")
_GUARDED = 1000  # values at least this long are checked for them
_LARGEST = 50_000  # larger values (where a key could be that long) are left to Spark
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# when a value breaks a rule (streamfill.rules), for the rules the reader checks, as Arrow computes it: true where
# the rule is broken (null: not broken)
CHECKED = {
    BrokenWhen.MISSING: lambda arr, _: arr.is_null(),  # no value, or one already left to Spark
    BrokenWhen.BELOW: lambda arr, bound: pc.less(_comparable(arr), _bound(bound, arr)),
    BrokenWhen.ABOVE: lambda arr, bound: pc.greater(_comparable(arr), _bound(bound, arr)),
    BrokenWhen.NOT_IN: lambda arr, values: pc.and_(arr.is_valid(),
                                                   pc.invert(pc.is_in(arr, _allowed(values, arr.type)))),
    BrokenWhen.LONGER: lambda arr, length: pc.greater(pc.utf8_length(arr), length),
}  # pattern (BrokenWhen.NO_MATCH) is Java's regular expressions: Spark checks it on the typed text


@dataclass(frozen=True)
class ValueColumn:
    """One typed column: the value's top-level `field`, its type and the rules the reader checks (streamfill.rules,
    those in CHECKED). The operands of min and max are in the column's terms as Spark computes them: whole
    numbers, a float, decimal text, epoch days (date) or epoch microseconds (timestamp)."""

    name: str
    field: str
    type: str
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        left = [r.key for r in self.rules if r.broken_when not in CHECKED]
        if left:
            raise ValueError(f"the read does not check {', '.join(left)}; leave those rules to Spark")

    @property
    def arrow(self) -> pa.DataType:
        m = _DECIMAL.fullmatch(self.type)
        return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else SCALARS[self.type]


_decoders: dict[JsonColumns, msgspec.json.Decoder] = {}


@dataclass(frozen=True)
class JsonColumns:
    """The `jsonColumns` option: the value's columns, and the keys that leave a record to Spark."""

    columns: tuple[ValueColumn, ...]
    reserved: tuple[str, ...] = ()

    @property
    def _decoder(self) -> msgspec.json.Decoder:
        """A decoder into a struct of the columns' fields, made once per worker (it does not pickle)."""
        if self not in _decoders:
            fields = [(f"c{i}", _python_type(c), msgspec.field(default=None, name=c.field))
                      for i, c in enumerate(self.columns)]
            fields += [(f"r{i}", object, msgspec.field(default=None, name=key))
                       for i, key in enumerate(self.reserved)]
            _decoders[self] = msgspec.json.Decoder(msgspec.defstruct("Record", fields))
        return _decoders[self]

    @classmethod
    def from_option(cls, raw: str) -> JsonColumns:
        """Parse and check the option's JSON; an OptionError names what is wrong."""
        try:
            doc = json.loads(raw)
            columns = tuple(_column(c) for c in doc["columns"])
            reserved = tuple(str(k) for k in doc.get("reserved", ()))
        except (ValueError, KeyError, TypeError) as exc:
            raise OptionError(OPTION, raw, f"is not a list of typed columns ({exc})",
                              'Give {"columns": [{"name": "n", "field": "n", "type": "bigint"}, ...]}') from None
        fields = [c.field for c in columns]
        if len(set(fields)) != len(fields) or len({c.name for c in columns}) != len(columns):
            raise OptionError(OPTION, raw, "names a column or a field twice", "Give each column its own field")
        if set(fields) & set(reserved):
            raise OptionError(OPTION, raw, "reads a reserved key", "Leave that field to Spark's parse")
        return cls(columns, reserved)

    def to_option(self) -> str:
        columns = [{"name": c.name, "field": c.field, "type": c.type, **as_mapping(c.rules)} for c in self.columns]
        return json.dumps({"columns": columns, "reserved": list(self.reserved)})

    @property
    def spark_schema(self) -> str:
        """The columns the source adds to Spark's Kafka schema (DDL)."""
        spark_type = {"string": "string", "int": "int", "bigint": "bigint", "double": "double",
                      "boolean": "boolean", "date": "date", "timestamp": "timestamp"}
        return ", ".join([f"{PARSED} boolean", *(f"`{PREFIX}{c.name}` {spark_type.get(c.type, c.type)}"
                                                 for c in self.columns)])

    @property
    def arrow_fields(self) -> list[pa.Field]:
        return [pa.field(PARSED, pa.bool_()), *(pa.field(PREFIX + c.name, c.arrow) for c in self.columns)]

    def parse(self, values: Sequence[bytes | None], arrow_values: pa.Array | None = None) -> list[pa.Array]:
        """`_parsed` and one typed array per column for these values (None: no value); `arrow_values`, the same
        values as an Arrow binary array when the caller has one."""
        n = len(values)
        ok = np.ones(n, bool)
        records = self._decode(values, ok, arrow_values)
        out = [None]
        for i, c in enumerate(self.columns):
            raw = list(map(attrgetter(f"c{i}"), records))
            out.append(_typed(c, raw, ok))
        for i in range(len(self.reserved)):
            keys = list(map(attrgetter(f"r{i}"), records))
            if keys.count(None) != n:
                ok &= np.fromiter((v is None for v in keys), bool, n)
        out[0] = pa.array(ok, pa.bool_())
        return out

    def _decode(self, values: Sequence[bytes | None], ok: np.ndarray, arrow_values: pa.Array | None) -> list:
        decoder = self._decoder
        decode = decoder.decode
        empty = decoder.decode(b"{}")
        records = []
        for i, value in enumerate(values):
            try:
                if value is None or (len(value) >= _GUARDED and _refused_by_jackson(value)):
                    raise ValueError
                records.append(decode(value))
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                ok[i] = False
                records.append(empty)
        # msgspec skips unknown fields without checking their text; Spark reads every byte as UTF-8
        try:
            (pa.array(values, pa.binary()) if arrow_values is None else arrow_values).cast(pa.string())
        except pa.ArrowInvalid:
            for i, value in enumerate(values):
                try:
                    value.decode("utf-8")
                except (AttributeError, UnicodeDecodeError):
                    ok[i] = False
        return records


def _refused_by_jackson(value: bytes) -> bool:
    return (len(value) > _LARGEST or value.count(b"[") + value.count(b"{") >= 1000
            or _LONG_NUMBER.search(value) is not None)


_KEYS = {"name", "field", "type", *(key for key in KEYS if MEANINGS[key].broken_when in CHECKED)}


def _column(doc: dict) -> ValueColumn:
    if set(doc) - _KEYS:
        raise ValueError(f"unknown keys {sorted(set(doc) - _KEYS)}; a column has {sorted(_KEYS)}")
    c = ValueColumn(name=str(doc["name"]), field=str(doc["field"]), type=str(doc["type"]).replace(" ", ""),
                    rules=rules_of(doc))
    c.arrow  # noqa: B018 - a type the reader cannot build raises KeyError
    return c


def can_check(type_: str, rules: tuple[Rule, ...]) -> bool:
    """Whether the reader can type a column of this type and check these rules but the ones it leaves to Spark
    (those outside CHECKED): an `in` list only of text, or of whole numbers for an int or bigint column."""
    if type_ not in SCALARS and not _DECIMAL.fullmatch(type_.replace(" ", "")):
        return False
    return all(r.broken_when is not BrokenWhen.NOT_IN or type_ == "string" or type_ in ("int", "bigint") and all(
        type(v) is int for v in r.operand) for r in rules)


def _python_type(c: ValueColumn) -> object:
    """What msgspec accepts for the column: anything else fails the record's decode (left to Spark)."""
    if c.type in ("string", "date", "timestamp"):
        return str | None
    if c.type in ("int", "bigint"):
        return int | None
    if c.type == "boolean":
        return bool | None
    return float | None if c.type == "double" else int | float | None  # decimal: integer or number


def _typed(c: ValueColumn, raw: list, ok: np.ndarray) -> pa.Array:
    """One column's Arrow array; clears ok where the record is left to Spark."""
    if c.type == "string":
        arr = pa.array(raw, pa.string())
        _clear(ok, pc.match_substring(arr, "\x00"))  # Spark's reason: not storable in PostgreSQL
    elif c.type in ("int", "bigint"):
        arr = _integers(raw, ok, 31 if c.type == "int" else 63).cast(c.arrow)
    elif c.type == "double":
        arr = pa.array(raw, pa.float64())
    elif c.type == "boolean":
        arr = pa.array(raw, pa.bool_())
    elif c.type == "timestamp":
        arr = _times(raw, ok, _TIMESTAMP, pa.timestamp("us", tz="UTC"))
    elif c.type == "date":
        arr = _times(raw, ok, _DATE, pa.date32())
    else:
        arr = _decimals(raw, ok, c.arrow)
    for rule in c.rules:
        _clear(ok, CHECKED[rule.broken_when](arr, rule.operand))
    return arr


def _allowed(values: tuple, to: pa.DataType) -> pa.Array:
    """The `in` list as the column's type; a number outside the type's range can never match, as in Spark."""
    if pa.types.is_string(to):
        return pa.array([v for v in values if isinstance(v, str)], pa.string())
    limit = 1 << (to.bit_width - 1)
    return pa.array([v for v in values if type(v) is int and -limit <= v < limit], pa.int64()).cast(to)


def _clear(ok: np.ndarray, broken: pa.Array) -> None:
    """A rule that fires (true) leaves the record to Spark; null (no value) fires no rule, as in Spark."""
    ok &= ~broken.fill_null(False).to_numpy(zero_copy_only=False)


def _comparable(arr: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(arr.type):
        return arr.cast(pa.int64())
    if pa.types.is_date32(arr.type):
        return arr.cast(pa.int32())
    return arr


def _bound(value: int | float | str, arr: pa.Array) -> pa.Scalar:
    if pa.types.is_decimal(arr.type):
        return pa.scalar(Decimal(str(value)), arr.type)
    if pa.types.is_timestamp(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_date32(arr.type):
        return pa.scalar(int(value), pa.int64())
    return pa.scalar(float(value), pa.float64())


def _integers(raw: list, ok: np.ndarray, bits: int) -> pa.Array:
    """Integers within the column's range; others are left to Spark (its cast gives null: out of range)."""
    try:
        arr = pa.array(raw, pa.int64())
    except OverflowError:
        limit = 1 << 63
        for i, v in enumerate(raw):
            if v is not None and not -limit <= v < limit:
                ok[i] = False
                raw[i] = None
        arr = pa.array(raw, pa.int64())
    if bits < 63:
        limit = 1 << bits
        wide = pc.or_(pc.less(arr, -limit), pc.greater_equal(arr, limit)).fill_null(False)
        _clear(ok, wide)
        arr = pc.if_else(wide, pa.scalar(None, pa.int64()), arr)
    return arr


def _times(raw: list, ok: np.ndarray, pattern: str, to: pa.DataType) -> pa.Array:
    """Text in one of the forms both parsers read alike, as a date or an instant; other text is left to Spark."""
    text = pa.array(raw, pa.string())
    canonical = pc.match_substring_regex(text, pattern).fill_null(True)
    _clear(ok, pc.invert(canonical))
    text = pc.if_else(canonical, text, pa.scalar(None, pa.string()))
    try:
        return text.cast(to)
    except pa.ArrowInvalid:  # a right form but a day or time that does not exist (February 30): one by one
        numbers = []
        for i, v in enumerate(text.to_pylist()):
            try:
                numbers.append(None if v is None else _one_time(v, to))
            except ValueError:
                ok[i] = False
                numbers.append(None)
        return pa.array(numbers, pa.int32() if pa.types.is_date32(to) else pa.int64()).cast(to)


def _one_time(text: str, to: pa.DataType) -> int:
    """Epoch days of a date, epoch microseconds of an instant."""
    if pa.types.is_date32(to):
        return (datetime.strptime(text, "%Y-%m-%d").date() - _EPOCH.date()).days
    return (datetime.fromisoformat(text.replace("Z", "+00:00")) - _EPOCH) // timedelta(microseconds=1)


def _decimals(raw: list, ok: np.ndarray, to: pa.Decimal128Type) -> pa.Array:
    """Numbers rounded half up to the column's scale, as Spark's cast does. A float reaches Spark's cast as
    the text of a double, so a float whose rounding depends on its last digits, or one too large to be exact
    here, is left to Spark; so is a value beyond the precision (Spark: out of range)."""
    n = len(raw)
    scale, precision = to.scale, to.precision
    if precision > 18:  # beyond int64: exact decimals, one by one
        out = []
        for i, v in enumerate(raw):
            d = None if v is None else _exact_decimal(v, scale, precision)
            if v is not None and d is None:
                ok[i] = False
            out.append(d)
        return pa.array(out, to)
    limit = 10 ** precision
    try:  # integers below 2**52 are exact doubles and round as the integers they are
        x = pa.array(raw, pa.float64()).to_numpy(zero_copy_only=False)
    except (OverflowError, pa.ArrowInvalid):
        x = np.array([float(v) if v is not None and abs(v) < 2 ** 52 else np.nan for v in raw], np.float64)
        ok &= np.fromiter((v is None or abs(v) < 2 ** 52 for v in raw), bool, n)
    present = ~np.isnan(x)
    scaled = np.abs(np.where(present, x, 0.0)) * 10.0 ** scale
    whole = np.floor(scaled)
    frac = scaled - whole
    valid = present & (scaled < 2.0 ** 52) & (np.abs(frac - 0.5) > 4 * np.spacing(scaled))
    rounded = np.where(valid, whole + (frac > 0.5), 0).astype(np.int64)
    valid &= rounded < limit
    unscaled = np.where(valid, np.where(x < 0, -rounded, rounded), 0)
    ok &= ~present | valid
    words = np.stack([unscaled, np.where(unscaled < 0, -1, 0)], axis=1)  # 128-bit two's complement
    validity = None if valid.all() else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(to, n, [validity, pa.py_buffer(words.tobytes())],
                                 null_count=int(n - valid.sum()))


def _exact_decimal(v: int | float, scale: int, precision: int) -> Decimal | None:
    """One number as Spark's cast gives it, or None where a double's last digits could change the rounding or
    the precision is exceeded."""
    quantum = Decimal(1).scaleb(-scale)
    if abs(v) >= 10 ** (precision - scale):
        return None  # Spark: out of range; also keeps quantize within the context's 100 digits (JSON has no NaN)
    with localcontext(prec=100):
        if type(v) is float:
            exact = Decimal(v)
            step = Decimal(float(np.spacing(abs(v)))) * 4
            d = (exact - step).quantize(quantum, ROUND_HALF_UP)
            if d != (exact + step).quantize(quantum, ROUND_HALF_UP):
                return None
        else:
            d = Decimal(v).quantize(quantum)
        return d if abs(d.scaleb(scale)) < 10 ** precision else None

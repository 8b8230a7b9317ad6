"""One typed column of a JSON value (`ValueColumn`) and how its decoded values become an Arrow array of its type,
checking the rules the reader can check; a value whose typing might differ from Spark's is left to Spark."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamfill.rules import BrokenWhen, Rule

SCALARS = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
           "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC")}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
# the forms Spark's cast and Arrow's ISO-8601 parser read alike: zone Z or an offset up to 18:00 (a time with more
# than 6 fractional digits, no zone, or a larger offset is read by Spark's own rules)
_TIMESTAMP = (r"^\d{4}-\d{2}-\d{2}[T ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
              r"(Z|[+-](0\d|1[0-7]):[0-5]\d|[+-]18:00)$")
_DATE = r"^\d{4}-\d{2}-\d{2}$"
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
        return arrow_type(self.type)


def arrow_type(type_: str) -> pa.DataType:
    """The Arrow type of a column type; KeyError for a type the reader cannot build."""
    m = _DECIMAL.fullmatch(type_)
    return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else SCALARS[type_]


def can_check(type_: str, rules: tuple[Rule, ...]) -> bool:
    """Whether the reader can type a column of this type and check these rules but the ones it leaves to Spark
    (those outside CHECKED): an `in` list only of text, or of whole numbers for an int or bigint column."""
    if type_ not in SCALARS and not _DECIMAL.fullmatch(type_.replace(" ", "")):
        return False
    return all(r.broken_when is not BrokenWhen.NOT_IN or type_ == "string" or type_ in ("int", "bigint") and all(
        type(v) is int for v in r.operand) for r in rules)


def typed_array(c: ValueColumn, raw: list, ok: np.ndarray) -> pa.Array:
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

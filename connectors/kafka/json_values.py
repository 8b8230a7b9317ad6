"""The `jsonColumns` option: JSON values typed into columns inside the read (less CPU than Spark's from_json and
casts), for the records whose typing is certain to be Spark's (`_parsed` true, typed values in `_p_<column>`); any
other record is left to Spark's own parse, which gives it its value or its dead-letter reason exactly as before.

The reader types a record only where the result cannot differ from Spark's parse (spark_jobs.pipelines.compile): a
JSON object in strict JSON, valid UTF-8, each field of the JSON type its column expects in a canonical form, and
every rule the reader can check passing. Where the two parsers could differ, the record is left to Spark: a decimal
whose rounding a double's last digit could change (Spark reads a JSON number through a double), a number or nesting
Jackson refuses even in fields it skips, a key named like Spark's corrupt-record column (`reserved`), a time in a
form Spark reads by its own rules. Pure: no Spark import.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import msgspec
import numpy as np
import pyarrow as pa

from streamfill.connectors.kafka.source_declarations import JSON_COLUMNS
from streamfill.connectors.kafka.value_columns import CHECKED, ValueColumn, arrow_type, typed_array
from streamfill.errors import OptionError
from streamfill.rules import KEYS, MEANINGS, as_mapping, rules_of

PARSED = "_parsed"  # true: the reader typed this record and every rule it checks passed
PREFIX = "_p_"  # the reader's typed value of column c is in _p_c
OPTION = JSON_COLUMNS.key
# Jackson's StreamReadConstraints refuse a number of 1,000 digits (a float's integer, fraction and exponent digits
# together) and nesting 1,000 deep, even in fields Spark skips; and a key name of 50,000 characters
_LONG_NUMBER = re.compile(rb"[-+.eE0-9]{1000}")
_GUARDED = 1000  # values at least this long are checked for them
_LARGEST = 50_000  # larger values (where a key could be that long) are left to Spark


@dataclass(frozen=True)
class JsonColumns:
    """The `jsonColumns` option: the value's columns, and the keys that leave a record to Spark."""

    columns: tuple[ValueColumn, ...]
    reserved: tuple[str, ...] = ()

    @property
    def _decoder(self) -> msgspec.json.Decoder:
        return _decoder_of(self)

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
            out.append(typed_array(c, raw, ok))
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


@functools.lru_cache(maxsize=32)
def _decoder_of(columns: JsonColumns) -> msgspec.json.Decoder:
    """A decoder into a struct of the columns' fields, made once per worker (it does not pickle)."""
    fields = [(f"c{i}", _python_type(c), msgspec.field(default=None, name=c.field))
              for i, c in enumerate(columns.columns)]
    fields += [(f"r{i}", object, msgspec.field(default=None, name=key))
               for i, key in enumerate(columns.reserved)]
    return msgspec.json.Decoder(msgspec.defstruct("Record", fields))


def _refused_by_jackson(value: bytes) -> bool:
    return (len(value) > _LARGEST or value.count(b"[") + value.count(b"{") >= 1000
            or _LONG_NUMBER.search(value) is not None)


_KEYS = {"name", "field", "type", *(key for key in KEYS if MEANINGS[key].broken_when in CHECKED)}


def _column(doc: dict) -> ValueColumn:
    if set(doc) - _KEYS:
        raise ValueError(f"unknown keys {sorted(set(doc) - _KEYS)}; a column has {sorted(_KEYS)}")
    c = ValueColumn(name=str(doc["name"]), field=str(doc["field"]), type=str(doc["type"]).replace(" ", ""),
                    rules=rules_of(doc))
    arrow_type(c.type)  # a type the reader cannot build raises KeyError
    return c


def _python_type(c: ValueColumn) -> object:
    """What msgspec accepts for the column: anything else fails the record's decode (left to Spark)."""
    if c.type in ("string", "date", "timestamp"):
        return str | None
    if c.type in ("int", "bigint"):
        return int | None
    if c.type == "boolean":
        return bool | None
    return float | None if c.type == "double" else int | float | None  # decimal: integer or number

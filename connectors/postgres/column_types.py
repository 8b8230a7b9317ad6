"""PostgreSQL column types as the sink compares them: one spelling per type, and whether a column of one type
stores every value the sink writes as another, unchanged."""

from __future__ import annotations

import re

# format_type() spells some types out; the sink's own names are the short ones
_TYPE_NAMES = {"timestamp with time zone": "timestamptz", "timestamp without time zone": "timestamp",
               "timestamp(6) with time zone": "timestamptz", "timestamp(6) without time zone": "timestamp",
               "character varying": "varchar"}


def normal_type(pg_type: str) -> str:
    """`numeric(12, 2)` and `numeric(12,2)`, `timestamptz` and `timestamp with time zone` compare equal."""
    text = " ".join(pg_type.lower().replace(", ", ",").split())
    return _TYPE_NAMES.get(text, text)


# Besides its own type, the column types that store every value of a type the sink writes unchanged. COPY
# accepts more, but rounds (numeric(p,s) of a smaller scale, real, timestamp(3)) or refuses only the values
# that do not fit (integer, varchar(n), numeric(p,s) of fewer digits), on an executor in the middle of a batch.
_WIDER = {"smallint": {"integer", "bigint", "real", "double precision"}, "integer": {"bigint", "double precision"},
          "real": {"double precision"}, "text": {"varchar"}}
_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}  # digits of each integer type's largest value
_NUMERIC = re.compile(r"numeric(?:\((\d+),(\d+)\))?")


def holds_every_value(existing: str, written: str) -> bool:
    """Whether a column of type `existing` stores every value the sink writes as `written`, unchanged."""
    have, want = normal_type(existing), normal_type(written)
    if have == want or have in _WIDER.get(want, ()):
        return True
    room, value = _NUMERIC.fullmatch(have), _NUMERIC.fullmatch(want)
    if room is None or not (want in _DIGITS or (value and value[1])):
        return False
    if room[1] is None:  # numeric without a precision: any number
        return True
    whole, scale = int(room[1]) - int(room[2]), int(room[2])
    if want in _DIGITS:
        return whole >= _DIGITS[want]
    return whole >= int(value[1]) - int(value[2]) and scale >= int(value[2])

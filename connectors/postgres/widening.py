"""Which change of a column's type the sink makes itself: a safe widening, after which the column stores every value
of its old type unchanged (smallint to integer or bigint, integer to bigint, numeric(p,s) to one with as many
digits before and after the point or more, varchar(n) to text or a longer varchar), and whether PostgreSQL rewrites
the table to make it. A rewrite copies every row and rebuilds the indexes while it holds ACCESS EXCLUSIVE, so every
reader of the table waits for it; a binary-compatible change (varchar to text) or a larger type modifier at the same
storage (a longer varchar, a numeric of more digits at the same scale) only updates the catalog. Pure: types in,
the decision out; types are spelled as `column_types.normal_type` gives them."""

from __future__ import annotations

import re
from dataclasses import dataclass

INTEGERS = ("smallint", "integer", "bigint")  # narrowest first
_NUMERIC = re.compile(r"numeric(?:\((\d+),(\d+)\))?")
_VARCHAR = re.compile(r"(?:varchar|character varying)(?:\((\d+)\))?")


@dataclass(frozen=True)
class Widening:
    """A column of type `have` becoming `want` by ALTER COLUMN ... TYPE, every value of it kept as it is."""

    have: str
    want: str
    rewrite: bool  # PostgreSQL copies every row and rebuilds the indexes, holding ACCESS EXCLUSIVE meanwhile


def widening(have: str, want: str) -> Widening | None:
    """`have` to `want` when it is one of the safe widenings, else None (a narrowing, another kind of value, or the
    same type)."""
    if have == want:
        return None
    if have in INTEGERS and want in INTEGERS:
        # each integer type is stored in its own width, so every row is written again
        return Widening(have, want, rewrite=True) if INTEGERS.index(want) > INTEGERS.index(have) else None
    old, new = _NUMERIC.fullmatch(have), _NUMERIC.fullmatch(want)
    if old and new:
        if old[1] is None:
            return None  # numeric without a precision holds any number: nothing is wider
        if new[1] is None:
            return Widening(have, want, rewrite=False)
        whole, scale = int(old[1]) - int(old[2]), int(old[2])
        new_whole, new_scale = int(new[1]) - int(new[2]), int(new[2])
        if new_whole < whole or new_scale < scale:
            return None
        # PostgreSQL keeps the stored values of a greater precision at the same scale; another scale pads each
        return Widening(have, want, rewrite=new_scale != scale)
    old, new = _VARCHAR.fullmatch(have), _VARCHAR.fullmatch(want)
    if old and old[1] is not None and (want == "text" or (new and (new[1] is None or int(new[1]) > int(old[1])))):
        return Widening(have, want, rewrite=False)
    return None

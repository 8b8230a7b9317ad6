"""What a column's rules mean, defined once (docs/pipelines.md, "Rules"): the order they are checked in, when a
value breaks each, the reason a dead letter gives and how a user reads it. Three readers translate these
values and none re-defines them: the Spark checks of a pipeline (spark_jobs.pipelines.compile), the read's own
typing (connectors.kafka.json_values) and the quality expectations (spark_jobs.pipelines.expectations).

A null value breaks only `required`: every other comparison with a null is unknown, which breaks nothing (as in SQL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class BrokenWhen(Enum):
    """When a value breaks a rule, in terms each reader translates into its own language."""

    MISSING = "missing"  # the field is absent or null
    BELOW = "below"  # value < operand
    ABOVE = "above"  # value > operand
    NOT_IN = "not in"  # value is none of the operand's values
    NO_MATCH = "no match"  # the regular expression operand matches nowhere in the value
    LONGER = "longer"  # the value has more than operand characters


class Shown(Enum):
    """What a dead letter's reason shows after the rule."""

    NOTHING = "nothing"
    VALUE = "value"  # ": 2500000"
    LENGTH = "length"  # ": 70 characters"


@dataclass(frozen=True)
class _Meaning:
    broken_when: BrokenWhen
    reason: str  # the dead letter's reason, {column} and {operand} filled in
    shown: Shown


# the entry's keys, in the order a record is checked; required comes before the value is typed
MEANINGS: dict[str, _Meaning] = {
    "required": _Meaning(BrokenWhen.MISSING, "missing field {column} (required)", Shown.NOTHING),
    "min": _Meaning(BrokenWhen.BELOW, "{column} below min {operand}", Shown.VALUE),
    "max": _Meaning(BrokenWhen.ABOVE, "{column} above max {operand}", Shown.VALUE),
    "in": _Meaning(BrokenWhen.NOT_IN, "{column} not in [{operand}]", Shown.VALUE),
    "pattern": _Meaning(BrokenWhen.NO_MATCH, "{column} does not match pattern {operand}", Shown.VALUE),
    "max_length": _Meaning(BrokenWhen.LONGER, "{column} longer than max_length {operand}", Shown.LENGTH),
}
KEYS = tuple(MEANINGS)
BOUNDS = (BrokenWhen.BELOW, BrokenWhen.ABOVE)  # the rules a bound in the column's type gives (min, max)


@dataclass(frozen=True)
class Rule:
    """One rule of a column as the entry gives it: its key and its operand (True for required, a tuple for in)."""

    key: str
    operand: Any = True

    def __post_init__(self) -> None:
        if self.key not in MEANINGS:
            raise ValueError(f"{self.key!r} is not a rule; the rules are {', '.join(KEYS)}")
        if isinstance(self.operand, list):
            object.__setattr__(self, "operand", tuple(self.operand))

    @property
    def broken_when(self) -> BrokenWhen:
        return MEANINGS[self.key].broken_when

    @property
    def shown(self) -> Shown:
        return MEANINGS[self.key].shown

    @property
    def on_typed_value(self) -> bool:
        """False for required, checked on the field before its type; the others look at the typed value."""
        return self.broken_when is not BrokenWhen.MISSING

    def reason(self, column: str) -> str:
        """The dead letter's reason, without what it shows: `amount above max 1000000`."""
        return MEANINGS[self.key].reason.format(column=column, operand=self._operand_text)

    def __str__(self) -> str:
        """As a user reads it: `required`, `min 0`, `in [EUR, USD]`, `max_length 64`."""
        if self.broken_when is BrokenWhen.MISSING:
            return self.key
        if self.broken_when is BrokenWhen.NOT_IN:
            return f"{self.key} [{self._operand_text}]"
        return f"{self.key} {self._operand_text}"

    @property
    def _operand_text(self) -> str:
        return ", ".join(map(str, self.operand)) if self.broken_when is BrokenWhen.NOT_IN else str(self.operand)


def rules_of(given: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The rules a mapping of the entry's keys gives (`{"required": true, "min": 0}`), in the order they are
    checked; a key that is absent, None or false gives no rule."""
    return tuple(Rule(key, given[key]) for key in KEYS
                 if given.get(key) is not None and given.get(key) is not False)


def as_mapping(rules: tuple[Rule, ...]) -> dict[str, Any]:
    """The entry's form of these rules, which `rules_of` reads back."""
    return {r.key: list(r.operand) if r.broken_when is BrokenWhen.NOT_IN else r.operand for r in rules}

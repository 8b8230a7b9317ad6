"""The trigger grammar of a stream, for the --trigger flag and a jobs-file entry's `trigger:` alike."""

from __future__ import annotations

from streamfill import durations
from streamfill.errors import OptionError

AVAILABLE_NOW = ("available-now", "availablenow")
TRIGGER_FIX = "use available-now (read what is there, then stop) or an interval such as 5s, 500ms or 1m"
_SPARK_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}


def parse_trigger(raw: str, option: str = "--trigger") -> dict:
    """`available-now` or an interval such as 500ms, 5s, 2m: DataStreamWriter.trigger's keyword arguments."""
    text = str(raw).strip().lower()
    if text in AVAILABLE_NOW:
        return {"availableNow": True}
    found = durations.split(text)
    if not found or found[1] not in _SPARK_UNITS or found[0] == 0:
        raise OptionError(option, raw, "is not a trigger", TRIGGER_FIX)
    return {"processingTime": f"{found[0]} {_SPARK_UNITS[found[1]]}"}

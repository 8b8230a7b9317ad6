"""A Kafka Connect connector's configuration in the forms Connect takes it (Kafka's documentation, Kafka Connect >
User Guide, "Running Kafka Connect" and "REST API"): the body of `POST /connectors` (`{"name": ..., "config":
{...}}`), the flat map of `PUT /connectors/NAME/config`, or a Java properties file. Pure: text in, settings out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from streamfill.errors import OptionError

ARGUMENT = "CONNECTOR"  # the command's argument, as its errors name it
SECRET = re.compile(r"(password|user\.info|jaas\.config|secret|credentials)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(password=)[^&;]*", re.IGNORECASE)


@dataclass(frozen=True)
class ConnectorConfig:
    """One connector's settings as Connect reads them (each value text), and its name where the form has one."""

    name: str | None
    settings: Mapping[str, str] = field(default_factory=dict)
    form: str = "POST /connectors"

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)


def shown(setting: str, value: str | None) -> str | None:
    """A setting's value as a message may show it: a secret's never, a JDBC URL's password never."""
    if value is None:
        return None
    if SECRET.search(setting) and not setting.endswith(".source"):
        return "<not shown: a secret>"
    return _URL_PASSWORD.sub(r"\1***", value)


def read(text: str, source: str) -> ConnectorConfig:
    """The configuration in `text` (from the file `source`): JSON in either REST form, else Java properties."""
    if source.endswith(".properties"):
        return _from_settings(properties(text), None, "properties")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(ARGUMENT, source, f"is not JSON ({exc.msg} at line {exc.lineno})", "give the connector's "
                          "JSON as POST /connectors or PUT /connectors/NAME/config take it, or a .properties "
                          "file") from None
    if not isinstance(parsed, dict):
        raise OptionError(ARGUMENT, source, "is not a JSON object", "give the connector's configuration object")
    if isinstance(parsed.get("offsets"), list) and "config" not in parsed and "connector.class" not in parsed:
        raise OptionError(ARGUMENT, source, "holds a connector's offsets (GET /connectors/NAME/offsets), not its "
                          "configuration", "give the connector's configuration: GET /connectors/NAME/config")
    if isinstance(parsed.get("config"), dict):
        name = parsed.get("name")
        return _from_settings(_texts(parsed["config"], source), name if isinstance(name, str) else None,
                              "POST /connectors")
    return _from_settings(_texts(parsed, source), None, "PUT /connectors/NAME/config")


def _from_settings(settings: dict[str, str], name: str | None, form: str) -> ConnectorConfig:
    """`name` from the form, else the settings' own `name` (Connect requires the two to agree)."""
    return ConnectorConfig(name or settings.get("name"), settings, form)


def _texts(obj: dict, source: str) -> dict[str, str]:
    """Connect's settings are text; JSON numbers and booleans are read as Connect's REST API reads them."""
    out = {}
    for key, value in obj.items():
        if isinstance(value, bool):
            out[key] = str(value).lower()
        elif isinstance(value, (str, int, float)):
            out[key] = str(value)
        elif value is None:
            out[key] = ""
        else:
            raise OptionError(key, json.dumps(value)[:80], f"in {source} is a JSON {type(value).__name__}, and a "
                              "connector's settings are text", "write the setting as a string")
    return out


def properties(text: str) -> dict[str, str]:
    """A Java properties file's keys and values: `#` and `!` comments, `=`, `:` or blanks between key and value, a
    line ending in a backslash continued on the next; the escapes \\t, \\n, \\uXXXX and an escaped character."""
    out: dict[str, str] = {}
    logical = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if _continued(stripped):
            logical += stripped[:-1]
            continue
        logical += stripped
        key, value = _split(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        out[key] = value
    return out


def _continued(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)

"""The single message transforms in front of a Kafka Connect JDBC sink, as `jobs from-connect` carries them: the
Debezium unwrap (the topic holds change events, which a `format: debezium` entry reads itself, and its settings
decide whether deletes reach the sink) and RegexRouter (it renames the topic the table's name is made from).
Any other transform changes the rows in a way an entry cannot say, so it is refused, named. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# (setting, value, problem, fix): one setting the translation cannot carry
Refuse = Callable[[str, str | None, str, str], None]

UNWRAPS = {  # class -> (MongoDB's, its old name, whose defaults drop every delete)
    "io.debezium.transforms.ExtractNewRecordState": (False, False),
    "io.debezium.transforms.UnwrapFromEnvelope": (False, True),  # its name before Debezium 0.10
    "io.debezium.connector.mongodb.transforms.ExtractNewDocumentState": (True, False),
    "io.debezium.connector.mongodb.transforms.UnwrapFromMongoDbEnvelope": (True, True),
}
REGEX_ROUTER = "org.apache.kafka.connect.transforms.RegexRouter"
# delete.tombstone.handling.mode (Debezium 2.5+): the modes whose deletes reach the sink as a tombstone
TOMBSTONE_MODES = ("tombstone", "delete-to-tombstone", "rewrite-with-tombstone")
# the unwrap's settings read here; any other one of it changes the rows or their names
UNWRAP_SETTINGS = ("type", "delete.tombstone.handling.mode", "drop.tombstones", "delete.handling.mode")
# what Java's regular expressions read otherwise than Python's re, or not at all
_JAVA_ONLY = re.compile(r"\\[pPQEzZ]|\(\?<[A-Za-z]|[*+?}]\+")


@dataclass(frozen=True)
class Unwrap:
    """The Debezium unwrap transform on the sink: the topic holds Debezium's change events."""

    alias: str
    mongodb: bool
    deletes_reach_sink: bool  # a deleted source row reaches the sink as a record with a null value
    dropping: tuple[tuple[str, str], ...] = ()  # the settings (and their values) that drop deletes before the sink


@dataclass(frozen=True)
class Router:
    """RegexRouter: a topic its regex fully matches becomes its replacement (Java's `$1` groups)."""

    alias: str
    regex: re.Pattern
    replacement: tuple[str | int, ...]  # literal text, or a group number

    def apply(self, topic: str) -> str:
        match = self.regex.fullmatch(topic)
        if match is None:
            return topic
        return "".join(part if isinstance(part, str) else (match.group(part) or "") for part in self.replacement)


@dataclass(frozen=True)
class Transforms:
    unwrap: Unwrap | None = None
    routers: tuple[Router, ...] = ()
    aliases: tuple[str, ...] = ()

    def routed(self, topic: str) -> str:
        """The topic as the sink sees it after every RegexRouter, in order."""
        for router in self.routers:
            topic = router.apply(topic)
        return topic


def read(settings: Mapping[str, str], refuse: Refuse, note: Callable[[str], None]) -> Transforms:
    """The transform chain of `settings` (`transforms` and `transforms.<alias>.*`); what cannot be carried is
    refused through `refuse`, each setting named."""
    aliases = tuple(a.strip() for a in (settings.get("transforms") or "").split(",") if a.strip())
    unwrap, routers = None, []
    for alias in aliases:
        own = {k[len(f"transforms.{alias}."):]: v for k, v in settings.items() if k.startswith(f"transforms.{alias}.")}
        kind = own.get("type")
        key = f"transforms.{alias}.type"
        for conditional in ("predicate", "negate"):
            if conditional in own:
                refuse(f"transforms.{alias}.{conditional}", own[conditional], "applies the transform to some records "
                       "only, and an entry reads every record alike", "remove the predicate, or keep Connect for "
                       "these records")
        if kind is None:
            refuse(key, None, f"is missing: transform {alias!r} names no class", "give its type, or remove "
                   f"{alias} from transforms")
        elif kind in UNWRAPS:
            if unwrap is not None:
                refuse(key, kind, f"unwraps Debezium's events a second time (transform {unwrap.alias!r} did)",
                       "keep one unwrap")
            unwrap = _unwrap(alias, kind, own, refuse, note)
        elif kind == REGEX_ROUTER:
            router = _router(alias, own, refuse)
            if router is not None:
                routers.append(router)
        else:
            refuse(key, kind, f"transform {alias!r} changes the records in a way an entry cannot say (from-connect "
                   "carries Debezium's unwrap and RegexRouter)", "drop the transform, or write the entry by hand "
                   "(docs/pipelines.md): columns read nested fields with field: a.b, derived computes new ones")
    return Transforms(unwrap, tuple(routers), aliases)


def _unwrap(alias: str, kind: str, own: Mapping[str, str], refuse: Refuse, note: Callable[[str], None]) -> Unwrap:
    """Whether deletes reach the sink past the unwrap (Debezium's event-flattening page, "Configuration"): the
    settings since 2.5 (delete.tombstone.handling.mode), or until 3.2 the older pair, whose defaults drop both the
    delete event and its tombstone."""
    mongodb, old_name = UNWRAPS[kind]
    prefix = f"transforms.{alias}."
    for setting in sorted(set(own) - set(UNWRAP_SETTINGS) - {"predicate", "negate"}):
        refuse(prefix + setting, own[setting], "changes what the unwrap gives the sink (columns, names, headers), "
               "which an entry reading Debezium's events itself does not do", "remove the setting, or keep Connect")
    mode = own.get("delete.tombstone.handling.mode")
    if mode is not None:
        if mode == "rewrite":
            refuse(prefix + "delete.tombstone.handling.mode", mode, "keeps deleted rows with __deleted=true (a soft "
                   "delete), and streamfill deletes them", "use delete.tombstone.handling.mode=tombstone with "
                   "delete.enabled=true on the connector (rows deleted at the source are deleted), or keep Connect")
            return Unwrap(alias, mongodb, False)
        if mode == "drop":
            return Unwrap(alias, mongodb, False, ((prefix + "delete.tombstone.handling.mode", mode),))
        if mode not in TOMBSTONE_MODES:
            refuse(prefix + "delete.tombstone.handling.mode", mode, "is not a mode of Debezium's unwrap",
                   f"use one of {', '.join(TOMBSTONE_MODES)}, drop or rewrite")
        if mode == "rewrite-with-tombstone":
            note(f"transform {alias}: rewrite-with-tombstone's __deleted field is no column of the entry; the "
                 "tombstone after it deletes the row, as Connect's delete.enabled does")
        return Unwrap(alias, mongodb, True)
    handling, tombstones = own.get("delete.handling.mode"), own.get("drop.tombstones")
    if handling is None and tombstones is None and not old_name:
        note(f"transform {alias} ({kind}) gives no delete setting: read as Debezium 2.5+ does, "
             "delete.tombstone.handling.mode=tombstone (each delete reaches the sink as a tombstone)")
        return Unwrap(alias, mongodb, True)
    handling, tombstones = handling or "drop", (tombstones or "true").lower()
    if handling == "rewrite":
        refuse(prefix + "delete.handling.mode", handling, "keeps deleted rows with __deleted=true (a soft delete), "
               "and streamfill deletes them", "use drop.tombstones=false with delete.enabled=true on the connector, "
               "or keep Connect")
        return Unwrap(alias, mongodb, False)
    if handling == "none" or tombstones == "false":
        return Unwrap(alias, mongodb, True)
    dropping = ((prefix + "delete.handling.mode", f"{handling}{'' if 'delete.handling.mode' in own else ' (default)'}"),
                (prefix + "drop.tombstones", f"{tombstones}{'' if 'drop.tombstones' in own else ' (default)'}"))
    return Unwrap(alias, mongodb, False, dropping)


def _router(alias: str, own: Mapping[str, str], refuse: Refuse) -> Router | None:
    regex, replacement = own.get("regex"), own.get("replacement")
    prefix = f"transforms.{alias}."
    for setting in sorted(set(own) - {"type", "regex", "replacement"}):
        refuse(prefix + setting, own[setting], "is no setting of RegexRouter", "remove it")
    if regex is None or replacement is None:
        refuse(prefix + ("regex" if regex is None else "replacement"), None, "is missing, which RegexRouter requires",
               "give both regex and replacement")
        return None
    if _JAVA_ONLY.search(regex):
        refuse(prefix + "regex", regex, "uses a construct Java reads otherwise than Python (\\p{..}, \\Q..\\E, \\z, "
               "\\Z, a named group (?<name>..), a possessive quantifier)", "rewrite it without, or give the entry's "
               "table by hand")
        return None
    try:
        compiled = re.compile(regex)
    except re.error as exc:
        refuse(prefix + "regex", regex, f"is not a regular expression ({exc})", "fix the regex")
        return None
    return Router(alias, compiled, _replacement(replacement, compiled.groups))


def _replacement(text: str, groups: int) -> tuple[str | int, ...]:
    """Java's Matcher replacement: `$n` a group (the longest number that names one), `\\x` the character x."""
    parts: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            parts.append(text[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 2
            number = int(text[i + 1])
            while j < len(text) and text[j].isdigit() and int(text[i + 1:j + 1]) <= groups:
                number = int(text[i + 1:j + 1])
                j += 1
            parts.append(number)
            i = j
        else:
            parts.append(c)
            i += 1
    return tuple(parts)

"""A parsed table's records as Kafka carries them (scenario.Encoding), and the pipeline entry that reads them: each
logical record as the bytes of its Kafka key and value, in the forms the software that writes them documents
(tests/data/keys/keys.json, tests/data/debezium/), the key form, the event's converter and the poison drawn per
record. Pure: the same record gives the same bytes, so a replay reads what the first try read.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path

import msgspec

from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.spark_jobs.pipelines import PipelineSpec
from tests.checker.scenario import (
    DEBEZIUM,
    EPOCH,
    SEMANTIC_COLUMNS,
    TOMBSTONE_KEYS,
    Encoding,
    Record,
    version_value,
)

DATA = Path(__file__).parents[1] / "data"
SAMPLE = "c7"  # the key the documented forms carry (tests/data/keys/keys.json), replaced by the record's
KEY_FIELD = "id"  # the documented keys' field, which the entry's key column k reads (as the value's)
ROW_SEQ = "seq"  # a row image's position field (position: after.seq, before.seq)
_JSON = msgspec.json.Encoder(decimal_format="number")  # a decimal as a JSON number, exactly
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True)
class Entry:
    """The entry a writer's batch is read with: its table's encoding, the version column its values carry
    (`seq` or `seq_at`; None without), and the type of `extra` from evolveSchema on (None before)."""

    encoding: Encoding
    version: str | None = None
    extra: str | None = None  # string, int or bigint


def spec(entry: Entry, name: str, topic: str, table: str, dead_letters: bool) -> PipelineSpec:
    """The pipeline entry of the batch, as a jobs file declares it."""
    columns: dict[str, dict] = {"k": {"type": "string", "field": KEY_FIELD}, "v": {"type": "string"},
                                SEMANTIC_COLUMNS[0]: {"type": "decimal(10,2)"}, SEMANTIC_COLUMNS[1]: {"type": "timestamp"}}
    if entry.version is not None:
        columns[entry.version] = {"type": "bigint" if entry.version == "seq" else "timestamp"}
    if entry.extra is not None:
        columns["extra"] = {"type": entry.extra}
    body: dict = {"name": name, "topic": topic, "table": table, "key": ["k"], "mode": REPLACE, "columns": columns,
                  "dead_letters": dead_letters, **({"version": entry.version} if entry.version else {})}
    encoding = entry.encoding
    if encoding.kind == TOMBSTONE_KEYS:
        return PipelineSpec.model_validate({**body, "deletes": "tombstone"})
    body.update(format=DEBEZIUM, **({"position": encoding.position} if encoding.position else {}),
                **({"deletes": "tombstone"} if encoding.tombstones else {}))
    if encoding.settings == "semantic.types":
        times = [SEMANTIC_COLUMNS[1], *(["seq_at"] if entry.version == "seq_at" else [])]
        body["debezium"] = {"semantic.types": dict.fromkeys(times, "MicroTimestamp")}
    elif encoding.settings == "time.precision.mode":
        body["debezium"] = {"time.precision.mode": "microseconds"}
    return PipelineSpec.model_validate(body)


def encoded(entry: Entry, seed: int, writer: int, r: Record) -> tuple[bytes | None, bytes | None]:
    """The record's Kafka key and value."""
    rng = random.Random(f"{seed}/{writer}/{r.partition}/{r.offset}/encoded")
    if entry.encoding.kind == TOMBSTONE_KEYS:
        return _tombstone_entry(entry, rng, r)
    return _debezium(entry, rng, r)


# ------------------------------------------------------------------------------------------------ keys


@cache
def key_forms() -> tuple[str, ...]:
    """The documented texts of a one-column string key (keys.json: a JSON string, JsonConverter's wrapper around
    a string and around a struct, plain text), and the struct's payload alone (JsonConverter without schemas, a
    JSON serializer of a record: a JSON object), each once."""
    keys = json.loads((DATA / "keys" / "keys.json").read_text())["keys"]
    texts = [k["key"] for k in keys if "key" in k and k["means"] in (SAMPLE, {KEY_FIELD: SAMPLE})]
    struct = next(k["key"] for k in keys if "key" in k and k["means"] == {KEY_FIELD: SAMPLE})
    return tuple(dict.fromkeys([*texts, json.dumps(json.loads(struct)["payload"])]))


@cache
def object_key_forms() -> tuple[str, ...]:
    """The forms that are an object of the key's field (bare or as JsonConverter's payload): a delete without
    `before` reads its row from them."""
    def names_row(text: str) -> bool:
        try:
            doc = json.loads(text)
        except ValueError:
            return False
        return isinstance(doc, dict) and KEY_FIELD in (doc.get("payload") if "schema" in doc else doc)
    return tuple(f for f in key_forms() if names_row(f))


def key_of(form: str, key: str) -> bytes:
    """A documented key text carrying `key` where it carries the sample."""
    try:
        doc = json.loads(form)
    except ValueError:  # plain text
        return form.replace(SAMPLE, key).encode()
    return json.dumps(_carrying(doc, key)).encode()


def _carrying(doc: object, key: str) -> object:
    if doc == SAMPLE:
        return key
    if isinstance(doc, dict):
        return {k: _carrying(v, key) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_carrying(v, key) for v in doc]
    return doc


NO_ROW_KEYS = (None, b"null", b"[1, 2]")  # a tombstone's key that names no row: none, JSON null, an array


# ------------------------------------------------------------------------------------------------ JSON entry


def _tombstone_entry(entry: Entry, rng: random.Random, r: Record) -> tuple[bytes | None, bytes | None]:
    key = key_of(rng.choice(key_forms()), r.key)
    if r.tomb:
        return key, None
    row: dict = {KEY_FIELD: r.key, "v": r.value}
    amount = r.amount
    row[SEMANTIC_COLUMNS[0]] = amount if rng.random() < 0.7 else str(amount)  # a JSON number, or its text
    row[SEMANTIC_COLUMNS[1]] = _iso(r.at, rng)
    if entry.version is not None and (r.position is not None or rng.random() < 0.5):  # a missing one absent or null
        version = version_value(entry.version, r.position)
        row[entry.version] = _iso(version, rng) if isinstance(version, datetime) else version
    if entry.extra is not None:
        row["extra"] = f"e{r.offset}" if entry.extra == "string" else r.offset
    if not r.poison:
        return key, _JSON.encode(row)
    poison = rng.randrange(3)
    if poison == 0:  # cut short: invalid JSON
        text = _JSON.encode(row)
        return key, text[:len(text) // 2]
    if poison == 1:  # a tombstone whose key names no row
        return rng.choice(NO_ROW_KEYS), None
    return key, _JSON.encode({**row, SEMANTIC_COLUMNS[0]: "x1"})  # no decimal


def _iso(t: datetime, rng: random.Random) -> str:
    text = t.isoformat()
    return text.replace("+00:00", "Z") if rng.random() < 0.5 else text


# ------------------------------------------------------------------------------------------------ Debezium


@cache
def _documented() -> dict:
    """Debezium's PostgreSQL create event through JsonConverter with schemas (tests/data/debezium/README.md):
    its envelope, `source`, and the schemas of a NUMERIC(10,2) (Connect's Decimal) and of a TIMESTAMP
    (io.debezium.time.MicroTimestamp) the rows' fields take."""
    return json.loads((DATA / "debezium" / "postgresql" / "orders_create.json").read_bytes())


def _field_schema(name: str, documented: str) -> dict:
    after = next(f for f in _documented()["schema"]["fields"] if f["field"] == "after")
    return {**next(f for f in after["fields"] if f["field"] == documented), "field": name}


def _row_schema(entry: Entry) -> list[dict]:
    fields = [{"type": "string", "optional": False, "field": KEY_FIELD}, {"type": "string", "optional": True,
                                                                          "field": "v"},
              _field_schema(SEMANTIC_COLUMNS[0], "price"), _field_schema(SEMANTIC_COLUMNS[1], "created")]
    if entry.encoding.row_position:
        fields.append({"type": "int64", "optional": True, "field": ROW_SEQ})
    if entry.version == "seq":
        fields.append({"type": "int64", "optional": True, "field": "seq"})
    elif entry.version == "seq_at":
        fields.append(_field_schema("seq_at", "created"))
    if entry.extra is not None:
        fields.append({"type": {"string": "string", "int": "int32", "bigint": "int64"}[entry.extra],
                       "optional": True, "field": "extra"})
    return fields


def _envelope_schema(entry: Entry) -> dict:
    schema = copy.deepcopy(_documented()["schema"])
    for f in schema["fields"]:
        if f["field"] in ("before", "after"):
            f["fields"] = _row_schema(entry)
    return schema


def decimal_text(amount: Decimal, scale: int = 2) -> str:
    """Connect's Decimal in JSON: the unscaled value's big-endian two's complement, fewest bytes, base64."""
    unscaled = int(amount.scaleb(scale))
    size = (~unscaled if unscaled < 0 else unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def micros(t: datetime) -> int:
    """io.debezium.time.MicroTimestamp: microseconds since the epoch."""
    return (t - EPOCH) // _MICRO


def _debezium(entry: Entry, rng: random.Random, r: Record) -> tuple[bytes | None, bytes | None]:
    encoding = entry.encoding
    wrapped = encoding.settings is None or rng.random() < 0.5
    key = key_of(rng.choice(object_key_forms() if not encoding.tombstones else key_forms()), r.key)
    versioned_delete = r.tomb and entry.version is not None and r.position is not None  # its `before` has it
    if r.tomb and encoding.tombstones and not versioned_delete and rng.random() < 0.5:  # a null tombstone
        return key, None
    documented = _documented()["payload"]
    source = {**documented["source"]}
    if encoding.by_position and not encoding.row_position:
        source["lsn"] = r.position
    row: dict = {KEY_FIELD: r.key, "v": r.value, SEMANTIC_COLUMNS[0]: decimal_text(r.amount),
                 SEMANTIC_COLUMNS[1]: micros(r.at)}
    if entry.version is not None:
        version = version_value(entry.version, r.position)
        row[entry.version] = micros(version) if isinstance(version, datetime) else version
    if entry.extra is not None:
        row["extra"] = f"e{r.offset}" if entry.extra == "string" else r.offset
    if encoding.row_position:
        row[ROW_SEQ] = r.position
    if r.tomb:
        before: dict | None = {KEY_FIELD: r.key, SEMANTIC_COLUMNS[0]: row[SEMANTIC_COLUMNS[0]],
                               **({ROW_SEQ: r.position} if encoding.row_position else {}),
                               **({entry.version: row[entry.version]} if versioned_delete else {})}
        if not (encoding.row_position or versioned_delete) and key in _object_keys(r.key) and rng.random() < 0.3:
            before = None  # MongoDB's without pre-images: the Kafka key names the row
        event = {**documented, "before": before, "after": None, "source": source, "op": "d"}
    else:
        op = rng.choice(("c", "r", "u"))
        before = {KEY_FIELD: r.key} if op == "u" and rng.random() < 0.5 else None
        event = {**documented, "before": before, "after": row, "source": source, "op": op}
    if r.poison:
        event, key = _poisoned(entry, rng, event, key)
        if event is None:
            return key, None
        if isinstance(event, bytes):
            return key, event
    value = {"schema": _envelope_schema(entry), "payload": event} if wrapped else event
    return key, _JSON.encode(value)


def _object_keys(key: str) -> set[bytes]:
    return {key_of(f, key) for f in object_key_forms()}


def _poisoned(entry: Entry, rng: random.Random, event: dict, key: bytes) -> tuple[dict | bytes | None, bytes | None]:
    """An upsert the parse refuses, with its own reason: invalid JSON, an amount that is no base64, an unknown op,
    a position that is none; with tombstones, a tombstone without a key."""
    kind = rng.choice(["json", "base64", "op", "position", *(["keyless"] if entry.encoding.tombstones else [])])
    if kind == "json":
        text = _JSON.encode(event)
        return text[:len(text) // 2], key
    if kind == "base64":
        return {**event, "after": {**event["after"], SEMANTIC_COLUMNS[0]: "C+o"}}, key
    if kind == "op":
        return {**event, "op": "t"}, key
    if kind == "keyless":
        return None, None
    if not entry.encoding.by_position:  # position: none reads none: an unknown op instead
        return {**event, "op": "t"}, key
    if entry.encoding.row_position:
        return {**event, "after": {k: v for k, v in event["after"].items() if k != ROW_SEQ}}, key
    return {**event, "source": {**event["source"], "lsn": "0x1F"}}, key

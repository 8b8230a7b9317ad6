"""MongoDB's Extended JSON (canonical, relaxed or the legacy strict mode) as the plain JSON the parse reads: the
documents Debezium's MongoDB connector writes as text in `after` and `before`, and the `_id` text in its Kafka
key. A wrapper of one value becomes that value: {"$oid": "5d50..."} its hex text, {"$numberLong": "1004"} the
number, {"$numberDecimal": "1.50"} the decimal's exact text, {"$date": ...} ISO text in UTC, {"$binary": ...}
its base64 (a UUID's subtype its UUID text). Other wrappers ($timestamp, $regularExpression, ...) stay as they
are. Pure: no Spark."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_UUID_SUBTYPES = ("04",)  # 03 is the legacy UUID, whose byte order each driver chose


def plain(value: object) -> object:
    """The value with every Extended JSON wrapper in it replaced by what it wraps."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    if len(value) in (1, 2) and all(isinstance(k, str) and k.startswith("$") for k in value):
        unwrapped = _unwrapped(value)
        if unwrapped is not value:
            return unwrapped
    return {k: plain(v) for k, v in value.items()}


def _unwrapped(value: Mapping) -> object:
    """What a wrapper holds, or `value` itself when it is no wrapper this module reads."""
    (key, inner), *rest = value.items()
    if rest:  # the legacy {"$binary": "...", "$type": "04"}
        if set(value) == {"$binary", "$type"}:
            return _binary(value["$binary"], value["$type"], value)
        return value
    if key == "$oid" and isinstance(inner, str):
        return inner
    if key in ("$numberLong", "$numberInt") and isinstance(inner, str):
        try:
            return int(inner)
        except ValueError:
            return value
    if key == "$numberDouble" and isinstance(inner, str):
        try:
            number = float(inner)
        except ValueError:
            return value
        return inner if number != number or number in (float("inf"), float("-inf")) else number
    if key == "$numberDecimal" and isinstance(inner, str):
        try:
            return format(Decimal(inner), "f") if Decimal(inner).is_finite() else inner
        except InvalidOperation:
            return value
    if key == "$date":
        return _date(inner, value)
    if key == "$binary" and isinstance(inner, Mapping):
        return _binary(inner.get("base64"), inner.get("subType"), value)
    if key == "$uuid" and isinstance(inner, str):
        return inner
    return value


def _date(inner: object, value: Mapping) -> object:
    """$date: ISO text (relaxed), or milliseconds since the epoch ({"$numberLong": ...} canonical, a number in
    the legacy form)."""
    if isinstance(inner, str):
        return inner
    if isinstance(inner, Mapping) and isinstance(inner.get("$numberLong"), str):
        inner = inner["$numberLong"]
    try:
        ms = int(inner)
    except (TypeError, ValueError):
        return value
    try:
        moment = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return value
    return moment.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def _binary(data: object, subtype: object, value: Mapping) -> object:
    if not isinstance(data, str):
        return value
    if subtype in _UUID_SUBTYPES:
        try:
            return str(uuid.UUID(bytes=base64.b64decode(data, validate=True)))
        except (binascii.Error, ValueError):
            return data
    return data

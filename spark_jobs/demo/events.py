"""The demo domain: order events as JSON, and the realistic ways such records go bad.

Valid event: {"event_id": uuid, "user_id": int, "event_type": one of EVENT_TYPES, "amount": number 0..MAX_AMOUNT
with 2 decimals, "currency": one of CURRENCIES, "event_time": ISO-8601 UTC}.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta, timezone

EVENT_TYPES = ("view", "cart", "order", "refund")
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "JPY")
MAX_AMOUNT = 100_000
FIELDS = ("event_id", "user_id", "event_type", "amount", "currency", "event_time")

# how a record goes bad, each as common as the others
BAD_KINDS = ("invalid_json", "missing_field", "wrong_type", "out_of_range")


def valid_event(rng: random.Random, now: datetime | None = None) -> dict:
    now = now or datetime.now(timezone.utc)
    kind = rng.choices(EVENT_TYPES, weights=(60, 20, 15, 5))[0]
    return {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "user_id": rng.randint(1, 50_000),
        "event_type": kind,
        "amount": 0.0 if kind == "view" else round(rng.uniform(1, 2_000), 2),
        "currency": rng.choice(CURRENCIES),
        "event_time": (now - timedelta(milliseconds=rng.randint(0, 5_000))).isoformat(timespec="milliseconds"),
    }


def bad_event(rng: random.Random, now: datetime | None = None) -> tuple[bytes, str]:
    """A record that must become a dead letter, and which rule it breaks."""
    event = valid_event(rng, now)
    kind = rng.choice(BAD_KINDS)
    if kind == "invalid_json":
        return json.dumps(event).encode()[: rng.randint(5, 40)], kind
    if kind == "missing_field":
        del event[rng.choice(("event_id", "user_id", "event_type", "amount", "currency", "event_time"))]
    elif kind == "wrong_type":
        field = rng.choice(("user_id", "amount", "event_time"))
        event[field] = {"user_id": "user-17", "amount": "twelve", "event_time": "yesterday"}[field]
    else:
        field = rng.choice(("amount", "event_type", "currency"))
        event[field] = {"amount": -rng.uniform(1, 100), "event_type": "teleport", "currency": "XXX"}[field]
        if field == "amount" and rng.random() < 0.5:
            event["amount"] = MAX_AMOUNT * 10
    return json.dumps(event).encode(), kind


def records(count: int, bad_ratio: float, seed: int = 7, key_field: str | None = "user_id",
            now: datetime | None = None):
    """(key, value, is_bad) for count events; the same seed gives the same events (the same bytes too when
    `now` is fixed; otherwise event times follow the clock)."""
    rng = random.Random(seed)
    for _ in range(count):
        if rng.random() < bad_ratio:
            value, _ = bad_event(rng, now)
            yield None, value, True
        else:
            event = valid_event(rng, now)
            key = None if key_field is None else str(event[key_field]).encode()
            yield key, json.dumps(event).encode(), False

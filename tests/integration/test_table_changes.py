"""Tables that follow their topics (docs/pipelines.md): a compacted topic's tombstones deleting rows, Debezium's
change events replicating a table, and one topic routed into three tables. Each entry runs as `streamfill stream`
and `streamfill backfill` do, in the test run's SparkSession, over real Kafka and PostgreSQL; each table is
compared with what the produced records say it must hold, computed here in plain Python."""

from __future__ import annotations

import json
import textwrap
import threading
import uuid
from collections import Counter
from decimal import Decimal

import pytest
from sqlalchemy import text

from streamfill.spark_jobs import backfill, stream
from tests.job_helpers import run_here
from tests.kafka_helpers import create_topic, produce

# one worker runs the module, so its world (topics produced, streams run) is made once
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("table_changes")]

KEYS = 10_000  # the compacted topic's keys


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


PRODUCER_CLOCKS = (1_796_000_000_000, 1_796_000_000_000 - 60_000)  # ms: the second producer's clock a minute behind


def customers() -> tuple[list[dict], list[dict]]:
    """The compacted topic's records, each key in one partition: first every key's first version and updates of
    a third of them, then tombstones of a tenth, some keys written again after their tombstone, more updates. The
    later records come from a producer whose clock is a minute behind: within a partition Kafka's order decides."""
    def version(n: int, v: int, clock: int) -> dict:
        return {"key": f"c{n}".encode(), "partition": n % 2, "timestamp": clock + n,
                "value": json.dumps({"id": f"c{n}", "name": f"n{n}-v{v}", "version": v}).encode()}

    early, late = PRODUCER_CLOCKS
    first = [version(n, 1, early) for n in range(KEYS)] + [version(n, 2, early) for n in range(0, KEYS, 3)]
    then = [{"key": f"c{n}".encode(), "partition": n % 2, "value": None, "timestamp": late + n}
            for n in range(1, KEYS, 10)]
    then += [version(n, 3, late) for n in range(1, KEYS, 50)] + [version(n, 4, late) for n in range(0, KEYS, 7)]
    return first, then


def compacted(records: list[dict]) -> dict[str, tuple[str, int]]:
    """The topic's compacted view: each key's last record, a tombstone leaving no row."""
    last: dict[bytes, bytes | None] = {}
    for r in records:
        last[r["key"]] = r["value"]
    return {k.decode(): (json.loads(v)["name"], json.loads(v)["version"]) for k, v in last.items() if v is not None}


SNAPSHOT_LSN = 500  # the snapshot read the source's rows 1..150 as of this position
MOVED = set(range(4, 151, 4))  # ids whose snapshot record is in the other partition


def change_events() -> tuple[list[dict], dict[int, tuple[str, Decimal]]]:
    """Debezium's events of a table `accounts` (keyed by id) and the table's final state in the source. In each
    partition a row's snapshot record (`r`, position SNAPSHOT_LSN) comes before its changes (positions from 1000),
    as Debezium writes them, except the snapshot records of every fourth id, which are in the other partition (as
    after the topic's partitions changed) and reach Kafka after their row's update or delete: there the source
    position decides. Every delete is followed by Debezium's tombstone, which the entry ignores. Odd ids' events
    are wrapped as JsonConverter with schemas.enable writes them."""
    state = {i: (f"s{i}", Decimal(f"{i}.10")) for i in range(1, 151)}
    snapshot = [("r", i, None, state[i], SNAPSHOT_LSN) for i in range(1, 151)]
    changes, lsn = [], 1000
    for i in range(151, 301):
        changes.append(("c", i, None, (f"c{i}", Decimal(f"{i}.20")), lsn))
        state[i] = (f"c{i}", Decimal(f"{i}.20"))
        lsn += 8
    for i in range(3, 301, 3):
        after = (f"u{i}", Decimal(f"{i}.30"))
        changes.append(("u", i, state[i], after, lsn))
        state[i], lsn = after, lsn + 8
    for i in range(10, 301, 10):
        changes.append(("d", i, state.pop(i), None, lsn))
        lsn += 8
    elsewhere = [r for r in snapshot if r[1] in MOVED]
    ordered = [r for r in snapshot if r[1] not in MOVED]
    for n, change in enumerate(changes):  # a moved snapshot record after every second change, then the rest
        ordered.append(change)
        if n % 2 and elsewhere:
            ordered.append(elsewhere.pop(0))
    ordered += elsewhere

    def row(i: int, values) -> dict | None:
        return None if values is None else {"id": i, "name": values[0], "balance": str(values[1])}

    def wrapped(i: int, payload: dict) -> bytes:
        return json.dumps({"schema": {"type": "struct"}, "payload": payload} if i % 2 else payload).encode()

    records = []
    for op, i, before, after, position in ordered:
        event = {"before": row(i, before), "after": row(i, after), "op": op, "ts_ms": 1,
                 "source": {"lsn": position, "snapshot": "true" if op == "r" else "false"}}
        partition = (i + (op == "r" and i in MOVED)) % 2
        records.append({"key": wrapped(i, {"id": i}), "value": wrapped(i, event), "partition": partition})
        if op == "d":
            records.append({"key": wrapped(i, {"id": i}), "value": None, "partition": i % 2})
    return records, state


ROUTED = ("order", "refund", "view")


def routed_events() -> tuple[list[dict], dict[tuple[int, int], str]]:
    """Events of three types and some no route takes, some breaking their table's rules; returns them and the
    dead-letter reason each bad one must get (by partition and offset)."""
    records, bad, offsets = [], {}, Counter()
    for i in range(600):
        kind = ROUTED[i % 3] if i % 29 else "bogus"
        event = {"event_type": kind, "order_id": f"o{i}", "amount": "12.50", "refund_id": f"r{i}",
                 "reason": "late", "page": f"/p/{i}"}
        reason = None
        if kind == "bogus":
            reason = "no route for event_type: bogus"
        elif i % 31 == 0:
            event["amount"] = "-5" if kind == "order" else event["amount"]
            event["reason"] = "lost" if kind == "refund" else event["reason"]
            event.pop("page") if kind == "view" else None
            reason = {"order": "amount below min 0: -5", "refund": "reason not in [damaged, late]: lost",
                      "view": "missing field page (required)"}[kind]
        partition = i % 2
        if reason:
            bad[(partition, offsets[partition])] = reason
        records.append({"value": json.dumps(event).encode(), "partition": partition})
        offsets[partition] += 1
    return records, bad


@pytest.fixture(scope="module")
def world(stack_settings, bootstrap, spark, tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("changes")
    names = {k: f"{k}_{tag}" for k in ("customers", "accounts", "events")}
    jobs = folder / "jobs.yaml"
    jobs.write_text(textwrap.dedent(f"""\
        jobs:
          {names['customers']}:
            topic: {names['customers']}
            columns:
              id:      {{type: string, required: true}}
              name:    {{type: string}}
              version: {{type: int}}
            table: {names['customers']}
            key: [id]
            mode: replace
            deletes: tombstone
          {names['accounts']}:
            topic: {names['accounts']}
            format: debezium
            debezium: {{decimal.handling.mode: string}}  # the events' balance is decimal text
            columns:
              id:      {{type: bigint, required: true}}
              name:    {{type: string}}
              balance: {{type: "decimal(10,2)"}}
            table: {names['accounts']}
            key: [id]
          {names['events']}:
            topic: {names['events']}
            columns:
              order_id: {{type: string, required: true}}
              amount:   {{type: "decimal(10,2)", min: 0}}
            route:
              field: event_type
              tables:
                order: {names['events']}_orders
                refund:
                  table: {names['events']}_refunds
                  columns:
                    refund_id: {{type: string, required: true}}
                    order_id:  {{type: string, required: true}}
                    reason:    {{type: string, in: [damaged, late]}}
                  key: [refund_id]
                  mode: replace
                view:
                  table: {names['events']}_views
                  columns:
                    page: {{type: string, required: true}}
        """))
    create_topic(bootstrap, names["customers"], 2, {"cleanup.policy": "compact"})
    first, then = customers()
    produce(bootstrap, names["customers"], first)
    first_ends = dict(Counter(r["partition"] for r in first))
    produce(bootstrap, names["customers"], then)
    create_topic(bootstrap, names["accounts"], 2)
    events, accounts = change_events()
    produce(bootstrap, names["accounts"], events)
    create_topic(bootstrap, names["events"], 2)
    routed, bad = routed_events()
    produce(bootstrap, names["events"], routed)

    def launch(name: str):
        return run_here(jobs, lambda: stream.run(
            stream.StreamArgs.from_flags(job=name, trigger="available-now", checkpoint=folder / f"ckpt-{name}"),
            spark, stack_settings.kafka_client(), stack_settings.offsets_db_url, threading.Event()))

    runs = {key: launch(name) for key, name in names.items()}
    # the older range of the customers, without its tombstones, replayed into the same table
    replay = run_here(jobs, lambda: backfill.run(backfill.BackfillArgs.from_flags(
        job=names["customers"], from_="earliest", to=json.dumps({str(p): e for p, e in first_ends.items()})),
        spark, stack_settings.kafka_client(), stack_settings.offsets_db_url))
    return {"names": names, "runs": runs, "replay": replay, "customers": compacted(first + then),
            "accounts": accounts, "bad": bad, "jobs": jobs}


def test_a_compacted_topic_streamed_then_replayed_is_its_compacted_view(world, db):
    name = world["names"]["customers"]
    for code, out in (world["runs"]["customers"], world["replay"]):
        assert code == 0, out[-3000:]
    rows = {k: (n, v) for k, n, v in query(db, f'SELECT id, name, version FROM "{name}"')}
    expected = world["customers"]
    assert len(expected) < KEYS, "the topic deletes keys"
    assert rows == expected, (f"{len(set(rows) - set(expected))} keys that should be deleted or absent, "
                              f"{len(set(expected) - set(rows))} missing, "
                              f"{sum(rows.get(k) != v for k, v in expected.items())} with another version")
    deleted = {k for (k,) in query(db, "SELECT key->>0 FROM deleted_keys WHERE target = :t", t=f"public.{name}")}
    tombstoned = {f"c{n}" for n in range(1, KEYS, 10)}
    # a key whose newest record is its tombstone is recorded; one written again in the same batch need not be
    assert tombstoned - set(expected) <= deleted <= tombstoned


def test_debezium_events_replicate_the_source_table_a_snapshot_never_overwriting_a_newer_change(world, db):
    name = world["names"]["accounts"]
    code, out = world["runs"]["accounts"]
    assert code == 0, out[-3000:]
    rows = {i: (n, b) for i, n, b in query(db, f'SELECT id, name, balance FROM "{name}"')}
    expected = world["accounts"]
    assert rows == expected, (f"{len(set(rows) - set(expected))} rows the source deleted or never had (e.g. "
                              f"{sorted(set(rows) - set(expected))[:5]}), {len(set(expected) - set(rows))} missing, "
                              f"{sorted(i for i in expected if i in rows and rows[i] != expected[i])[:5]} stale")
    positions = dict(query(db, f'SELECT id, source_position FROM "{name}"'))
    assert positions[1] == SNAPSHOT_LSN and positions[3] > SNAPSHOT_LSN, "each row keeps its change's position"
    assert query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                 j=name) == [(0,)], "tombstones are ignored, not dead letters"


def test_one_topic_routed_into_three_tables_and_dead_letters_accounts_for_every_offset_once(world, db):
    name = world["names"]["events"]
    code, out = world["runs"]["events"]
    assert code == 0, out[-3000:]
    landed: list[tuple[int, int]] = []
    for table in (f"{name}_orders", f"{name}_refunds", f"{name}_views"):
        landed += query(db, f'SELECT partition, "offset" FROM "{table}"')
    dead = {(p, o): e for p, o, e in query(db, 'SELECT d.partition, d."offset", d.error FROM dead_letters d JOIN jobs j '
                                               "ON j.id = d.job_id WHERE j.name = :j", j=name)}
    ends = dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j", j=name))
    assert len(landed) == len(set(landed)) and not set(landed) & set(dead), "every offset is one row or letter"
    assert set(landed) | set(dead) == {(p, o) for p, end in ends.items() for o in range(end)}
    assert sum(ends.values()) == 600
    wrong = {at: (dead.get(at), reason) for at, reason in world["bad"].items() if not (dead.get(at) or "").startswith(reason)}
    assert wrong == {} and set(dead) == set(world["bad"]), "each bad record is a dead letter with its reason"
    assert query(db, f'SELECT count(*), count(DISTINCT refund_id) FROM "{name}_refunds"')[0][0] > 150
    columns = {t: {c for (c,) in query(db, "SELECT column_name FROM information_schema.columns WHERE table_name = :t",
                                       t=t)} for t in (f"{name}_orders", f"{name}_views")}
    assert "page" not in columns[f"{name}_orders"] and "amount" not in columns[f"{name}_views"], \
        "each table has its own columns"


def test_a_routed_entrys_quality_checks_each_table_by_its_own_rules_and_reconciles_all_of_them(world, db,
                                                                                                stack_settings,
                                                                                                monkeypatch):
    """The quality suite of a routed entry runs on each of its tables with that table's columns, rules and key, one
    quality_results row each, and reconciles the rows of all its tables + dead letters with the offsets the job
    consumed; a row of the second table that breaks its table's rule fails that table's check alone."""
    from streamfill.errors import QualityFailed
    from streamfill.spark_jobs import quality

    name = world["names"]["events"]
    code, out = world["runs"]["events"]
    assert code == 0, out[-3000:]
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(world["jobs"]))
    url = stack_settings.offsets_db_url
    tables = [f"{name}_orders", f"{name}_refunds", f"{name}_views"]

    def verdicts(outcome) -> dict[str, bool]:
        """Each table's verdict as quality_results stored it for this check."""
        ids = [part.result_id for part in outcome.tables]
        return dict(query(db, "SELECT table_name, success FROM quality_results WHERE id = ANY(:ids)", ids=ids))

    outcome = quality.validate(url, None, name, pipeline=name, whole_table=True)
    assert outcome.success, outcome.lines
    assert verdicts(outcome) == dict.fromkeys(tables, True)
    for table, rule in ((tables[0], "amount"), (tables[1], "reason"), (tables[2], "page")):
        assert [line for line in outcome.lines if line.startswith(f"PASS {table}: ") and rule in line], outcome.lines
    reconciled = [line for line in outcome.lines if "rows landed in" in line]
    assert reconciled and all(t in reconciled[0] for t in tables), reconciled

    refund = query(db, f'SELECT refund_id FROM "{tables[1]}" ORDER BY refund_id LIMIT 1')[0][0]

    def set_reason(reason: str) -> None:
        with db.begin() as conn:
            conn.execute(text(f'UPDATE "{tables[1]}" SET reason = :reason WHERE refund_id = :r'),
                         {"reason": reason, "r": refund})

    set_reason("lost")  # not one of the refunds table's [damaged, late]
    try:
        broken = quality.validate(url, None, name, pipeline=name, whole_table=True)
        assert verdicts(broken) == {tables[0]: True, tables[1]: False, tables[2]: True}
        with pytest.raises(QualityFailed, match=rf"{tables[1]}.*reason"):
            quality.require(broken)
        alone = quality.validate(url, tables[1], name, pipeline=name, whole_table=True)
        assert [part.table for part in alone.tables] == [tables[1]] and not alone.success
        assert [line for line in alone.lines if line.startswith("FAIL")] == [
            line for line in alone.lines if line.startswith("FAIL") and "reason" in line], alone.lines
    finally:
        set_reason("late")


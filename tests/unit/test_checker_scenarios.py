"""The checker's scenarios and model (tests/checker): a seed draws the same scenario every time, the draws
cover the space the guarantees page lists, and the model applies the contract's rules."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from streamfill.connectors.postgres.sink_options import APPEND_NEW, REPLACE
from tests.checker import kafka_forms
from tests.checker.model import Model
from tests.checker.regressions import REGRESSIONS
from tests.checker.scenario import (
    ACTIONS,
    DEBEZIUM,
    FAULTS,
    LOG_END,
    LONG,
    MID_LOG,
    MISSING,
    NO_POSITION,
    OAUTH,
    PARTITIONS,
    PATHS,
    PLAINTEXT,
    POSITION_PATHS,
    SASL_SSL,
    STREAM,
    T0,
    TOMBSTONE_KEYS,
    UNIT_SETTINGS,
    Action,
    Encoding,
    Record,
    Table,
    Write,
    Writer,
    draw,
    fingerprint,
    record,
)

pytestmark = pytest.mark.unit


def test_a_seed_draws_the_same_scenario_and_the_same_records_every_time():
    assert draw(7) == draw(7) and draw(7) != draw(8)
    assert record(7, 0, True, 1, 42) == record(7, 0, True, 1, 42)


def test_each_regression_seed_still_draws_the_scenario_that_found_its_defect():
    assert {seed: fingerprint(draw(seed)) for seed in REGRESSIONS} == {
        seed: pinned for seed, (_, pinned) in REGRESSIONS.items()}, "see tests/checker/regressions.py"


def test_two_hundred_seeds_reach_every_path_fault_action_and_option():
    scenarios = [draw(seed) for seed in range(200)]
    writers = [w for s in scenarios for w in s.writers]
    steps = [step for s in scenarios for step in s.steps]
    assert {w.path for w in writers} == set(PATHS)
    assert {s.fault for s in steps if isinstance(s, Write)} == {None, *FAULTS}
    assert {s.kind for s in steps if isinstance(s, Action)} == set(ACTIONS)
    assert {(s.table.mode, s.table.keyed) for s in scenarios} == {(APPEND_NEW, False), (REPLACE, False),
                                                                  (REPLACE, True)}
    assert {w.dead_letters for w in writers if w.job} == {True, False}
    assert any(w.evolve_from is not None for w in writers)
    assert any(len(s.writers) == 2 for s in scenarios)
    assert any(s.prunes for s in scenarios)
    assert {w.listener for w in writers if w.mirror} == {PLAINTEXT, SASL_SSL, OAUTH}
    encodings = [s.table.encoding for s in scenarios if s.table.encoding]
    assert {e.kind for e in encodings} == {TOMBSTONE_KEYS, DEBEZIUM}
    assert {e.position for e in encodings if e.kind == DEBEZIUM} == {*POSITION_PATHS, NO_POSITION}
    assert {e.settings for e in encodings if e.kind == DEBEZIUM} == {None, *UNIT_SETTINGS}
    assert any(e.tombstones for e in encodings)
    assert all(s.table.keyed and not s.table.routed for s in scenarios if s.table.encoding)
    assert any(w.group for w in writers)


def test_a_stream_started_at_a_connect_group_writes_each_partition_from_the_groups_offset_or_earliest():
    """`start: group:NAME`: each partition's committed offset none (earliest), within the log or at its end; a
    live member, a group without any commit (refused, then earliest), a first launch killed once its start is
    kept; read over each listener, beside the other draws."""
    scenarios = [draw(seed) for seed in range(400)]
    started = [(s, i, w) for s in scenarios for i, w in enumerate(s.writers) if w.group]
    kinds: set[str] = set()
    for s, i, w in started:
        group = w.group
        assert w.path == STREAM and not w.start and w.pins == (not group.refused)
        assert all(c is None or 1 <= c <= end for c, end in zip(group.committed, group.log_end))
        kinds |= {MISSING if c is None else LOG_END if c == end else MID_LOG
                  for c, end in zip(group.committed, group.log_end)}
        firsts: dict[int, int] = {}
        for step in s.steps:
            if isinstance(step, Write) and step.writer == i:
                for p, start, _ in step.ranges:
                    firsts.setdefault(p, start)
        assert firsts == {p: group.committed[p] or 0 for p in firsts} == {p: w.first(p) for p in firsts}
        assert group.listener == w.listener or not w.mirror
    assert kinds == {MISSING, MID_LOG, LOG_END}
    groups = [w.group for _, _, w in started]
    assert {g.listener for g in groups} == {PLAINTEXT, SASL_SSL, OAUTH}
    assert all(any(flag(g) for g in groups) for flag in (
        lambda g: g.member, lambda g: g.killed, lambda g: g.refused, lambda g: not (g.member or g.killed or g.refused)))
    assert {w.dead_letters for _, _, w in started} == {True, False}
    assert any(w.mirror for _, _, w in started) and any(len(s.writers) == 2 for s, _, _ in started)
    first_faults = {next(st.fault for st in s.steps if isinstance(st, Write) and st.writer == i) for s, i, _ in started
                    if any(isinstance(st, Write) and st.writer == i for st in s.steps)}
    assert {None, *FAULTS} <= first_faults | {None}
    assert 0.05 < len({s.seed for s, _, _ in started}) / len(scenarios) < 0.15


def test_a_parsed_tables_records_are_what_its_kafka_can_carry():
    """A Debezium entry that reads a position gets one in every event (a missing one drawn); a delete has a
    version column's value only as a `d` event's `before` carries it (about half of them); nothing else changes."""
    by_position, by_column = Encoding(DEBEZIUM, "source.lsn"), Encoding(DEBEZIUM, NO_POSITION)
    versioned_deletes: set[bool] = set()
    for p in range(PARTITIONS):
        for o in range(300):
            plain = record(5, 0, False, p, o, tombstones=True, positioned=True)
            positioned = record(5, 0, False, p, o, True, True, encoding=by_position)
            assert positioned.position is not None and positioned == replace(plain, position=positioned.position)
            assert plain.position is None or plain.position == positioned.position
            column = record(5, 0, False, p, o, True, True, encoding=by_column)
            assert column in ((plain, replace(plain, position=None)) if plain.tomb else (plain,))
            versioned_deletes.add(column.tomb and column.position is not None)
    assert versioned_deletes == {False, True}, "deletes with and without a version column's value"
    tombstone_keys = Encoding(TOMBSTONE_KEYS)
    assert all(record(5, 0, False, 0, o, True, True, encoding=tombstone_keys).position is None
               for o in range(300) if record(5, 0, False, 0, o, True, True).tomb), "a tombstone has no version"


def test_the_kafka_forms_are_the_documented_ones_carrying_the_records_values():
    keys = json.loads((kafka_forms.DATA / "keys" / "keys.json").read_text())["keys"]
    forms = kafka_forms.key_forms()
    assert {k["key"] for k in keys if "key" in k and k["means"] in ("c7", {"id": "c7"})} < set(forms)
    assert {kafka_forms.key_of(f, "k3") for f in forms} == {
        b'"k3"', b"k3", b'{"id": "k3"}',
        b'{"schema": {"type": "string", "optional": false}, "payload": "k3"}',
        b'{"schema": {"type": "struct", "fields": [{"type": "string", "optional": false, "field": "id"}], '
        b'"optional": false, "name": "customers.Key"}, "payload": {"id": "k3"}}'}
    assert len(kafka_forms.object_key_forms()) == 2
    # tests/data/debezium/README.md: NUMERIC(10,2) 30.50 is "C+o=", 1275.00 "AfIM"; TIMESTAMP 2018-06-20
    # 15:13:16.945104 is 1529507596945104
    assert [kafka_forms.decimal_text(Decimal(d)) for d in ("30.50", "1275.00", "-1.28", "0.00")] == [
        "C+o=", "AfIM", "gA==", "AA=="]
    assert kafka_forms.micros(datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=timezone.utc)) == 1529507596945104
    assert kafka_forms.micros(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)) == -1


def test_each_record_encodes_the_same_every_time_and_poison_only_as_what_the_parse_refuses():
    entry = kafka_forms.Entry(Encoding(DEBEZIUM, "after.seq", "semantic.types"), extra="int")
    spec = kafka_forms.spec(entry, "j", "t", "tbl", dead_letters=True)
    assert (spec.format, spec.position, spec.debezium.semantic_types) == (DEBEZIUM, "after.seq",
                                                                         {"at": "MicroTimestamp"})
    drawn = [record(9, 0, True, 0, o, positioned=True, encoding=entry.encoding) for o in range(200)]
    assert [kafka_forms.encoded(entry, 9, 0, r) for r in drawn] == [kafka_forms.encoded(entry, 9, 0, r) for r in drawn]
    for r in drawn:
        _, value = kafka_forms.encoded(entry, 9, 0, r)
        if r.poison:
            continue
        event = json.loads(value)
        event = event.get("payload", event)
        assert event["op"] in ("c", "r", "u") and event["after"]["seq"] == r.position
        assert (event["after"]["id"], event["after"]["amount"], event["after"]["extra"]) == (
            r.key, kafka_forms.decimal_text(r.amount), r.offset)


def _record(offset: int, key: str, stamp, value: str = "v", partition: int = 0, poison: bool = False) -> Record:
    return Record(partition, offset, key, stamp, value, poison)


def test_the_model_keeps_a_keys_newest_version_by_offset_within_a_partition_and_by_timestamp_between():
    model = Model(Table(REPLACE, keyed=True))
    writer = Writer("stream", dead_letters=True, evolve_from=None)
    later = T0 + timedelta(seconds=1)
    model.write(0, writer, "t", [_record(0, "A", later, "old"), _record(1, "A", None, "unstamped, later offset"),
                                 _record(2, "B", T0, "x", poison=True), _record(3, "C", T0, "p0"),
                                 _record(0, "C", None, "p1 unstamped", partition=1)], evolved=False)
    assert {r["k"]: r["v"] for r in model.rows.values()} == {"A": "unstamped, later offset", "C": "p0"}
    assert model.dead == {0: {("t", 0, 2)}} and model.committed == {0: {0: 4, 1: 1}}
    model.write(0, writer, "t", [_record(1, "C", T0 - timedelta(seconds=9), "p1 stamped, earlier")], evolved=False)
    assert model.rows[("C",)]["v"] == "p0", "between partitions the later Kafka timestamp wins"


def test_the_model_fails_a_batch_whose_refused_row_has_nowhere_to_go_and_keeps_it_as_a_dead_letter_otherwise():
    model = Model(Table(APPEND_NEW, keyed=False))
    model.exists, model.check_on = True, True
    batch = [_record(0, "A", T0), _record(1, "B", T0, LONG)]
    off = Writer("backfill", dead_letters=False, evolve_from=None)
    assert model.write(0, off, "t", batch, evolved=False) == [batch[1]]
    assert not model.rows and not model.committed, "a failed batch changes nothing"
    on = Writer("backfill", dead_letters=True, evolve_from=None)
    model.write(1, on, "u", batch, evolved=False)
    assert set(model.rows) == {("u", 0, 0)} and model.dead == {1: {("u", 0, 1)}}

"""The checker's scenarios and model (tests/checker): a seed draws the same scenario every time, the draws
cover the space the guarantees page lists, and the model applies the contract's rules."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamfill.connectors.postgres.sink_options import APPEND_NEW, REPLACE
from tests.checker.model import Model
from tests.checker.regressions import REGRESSIONS
from tests.checker.scenario import (
    ACTIONS,
    FAULTS,
    LONG,
    OAUTH,
    PATHS,
    PLAINTEXT,
    SASL_SSL,
    T0,
    Action,
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


def _record(offset: int, key: str, stamp, value: str = "v", partition: int = 0, poison: bool = False) -> Record:
    return Record(partition, offset, key, stamp, value, poison)


def test_the_model_keeps_a_keys_newest_version_and_ranks_one_without_a_timestamp_lowest():
    model = Model(Table(REPLACE, keyed=True))
    writer = Writer("stream", dead_letters=True, evolve_from=None)
    later = T0 + timedelta(seconds=1)
    model.write(0, writer, "t", [_record(0, "A", later, "new"), _record(1, "A", None, "unstamped"),
                                 _record(2, "B", T0, "x", poison=True)], evolved=False)
    assert [(r["k"], r["v"]) for r in model.rows.values()] == [("A", "new")]
    assert model.dead == {0: {("t", 0, 2)}} and model.committed == {0: {0: 3}}


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

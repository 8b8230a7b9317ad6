"""The randomized checker (tests/checker) in every run: fixed seeds, and each seed that once broke an
invariant. Each run ends with every invariant checked against the model: the table's rows, the dead letters,
per job the committed offsets (contiguous, once) and its commit numbers (without gap), rows + dead letters +
rows the user deleted = offsets committed in append-new, the user's trigger count, no reader refused, and with
commitToGroup the group's offsets equal to offsets_db's after every commit (the stack's broker, PLAINTEXT or
SASL_SSL), and offsets_db's deleted keys each key's newest tombstone. A seed whose table is parsed (its records
encoded as Kafka carries them and read by the production parse) parses in the run's one SparkSession, started
only when such a seed runs."""

from __future__ import annotations

import uuid

import pytest

from tests.checker.harness import Run
from tests.checker.regressions import REGRESSIONS
from tests.checker.scenario import draw
from tests.integration.conftest import worker_ports
from tests.private_services import private_postgres

pytestmark = [pytest.mark.integration, pytest.mark.fault]

SEEDS = range(1, 13)  # 12: a deletes: tombstone JSON entry, its keys in every documented form
# parsed tables beside seed 12: Debezium events at the connector's position (with and without their schema), in
# the row image (before.seq), and with position: none, a version column and null tombstones
PARSED_SEEDS = (159, 44, 256)


@pytest.fixture(scope="module")
def checker_postgres(stack_settings):
    with private_postgres(stack_settings, worker_ports(stack_settings.pg_port + 140)) as postgres:
        yield postgres


@pytest.mark.parametrize("seed", [*REGRESSIONS, *SEEDS, *PARSED_SEEDS])
def test_a_drawn_scenario_keeps_every_invariant(checker_postgres, stack_settings, request, seed):
    Run(draw(seed), checker_postgres, f"t_{uuid.uuid4().hex[:10]}", stack_settings,
        spark=lambda: request.getfixturevalue("spark")).run()

"""Seeds that once broke an invariant, each kept as a regression test (tests/integration/test_checker.py) with
what it found and the fingerprint of the scenario it draws. A failing seed of `make soak` belongs here; when a
change of the generator changes a fingerprint, find seeds that fail on the commit before each fix again (run
`python -m tests.checker.soak --first-seed N --seeds 1` in a checkout of that commit with this checker)."""

from __future__ import annotations

# seed: (what it found, fingerprint of its scenario); the first three on a0c763e
REGRESSIONS: dict[int, tuple[str, str]] = {
    1000: ("in replace, a version without a Kafka timestamp won over newer ones (NULLs first in ORDER BY ... DESC)",
           "73f7cb388d4b813c"),
    1003: ("a df.write without a job left out a row the table refused, and succeeded", "e5b2eec987f0116d"),
    1020: ("a backfill with dead letters off left out a row the table refused while its offsets committed",
           "f2b4df55d2c8b2bd"),
    # found while `version:` came in: a Debezium delete's `before` kept its version column in Spark's parse but
    # not in the Python step that decodes the event, so a delete lost to an older upsert of another partition
    7000046: ("a Debezium delete ordered by a version column lost it in the event's decoding", "fda4c9791d5c72ba"),
}

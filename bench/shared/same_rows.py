"""The check that ways of bench/end_to_end.py wrote the same: equal rows and equal dead letters."""

from __future__ import annotations

from sqlalchemy import text

# compared across ways; event_time as epoch seconds (JDBC's table has timestamp, streamfill's timestamptz)
COLUMNS = ('topic', 'partition', '"offset"', "event_id", "user_id", "event_type", "amount", "currency",
           "extract(epoch FROM event_time)")


def compare(engine, written: dict[str, tuple[str, str]], ways: list[str]) -> list[str]:
    """The ways' tables hold the same rows, and their dead letters the same offsets and reasons."""
    cols = ", ".join(COLUMNS)
    digests = {}
    with engine.connect() as conn:
        for k in ways:
            table, dead = written[k]
            rows = conn.scalar(text(f'SELECT md5(string_agg(({cols})::text, \',\' ORDER BY topic, partition, '
                                    f'"offset")) FROM "{table}"'))
            if dead.startswith("job:"):
                letters = conn.scalar(text(
                    "SELECT md5(string_agg((d.topic, d.partition, d.\"offset\", d.error)::text, ',' ORDER BY d.topic, "
                    'd.partition, d."offset")) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j'),
                    {"j": dead[4:]})
            else:
                letters = conn.scalar(text(
                    f'SELECT md5(string_agg((topic, partition, "offset", error)::text, \',\' ORDER BY topic, '
                    f'partition, "offset")) FROM "{dead}"'))
            digests[k] = (rows, letters)
    assert len(set(digests.values())) == 1, f"the ways wrote different rows or dead letters: {digests}"
    return ways

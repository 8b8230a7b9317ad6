"""What it costs to keep Kafka's order within a partition: the merging move of mode replace with the rule it has
(connectors/postgres/versions.py: each key's last record of each partition, then the newest of those by the
declared order; an existing row replaced by offset within a partition, by the declared order between) beside the
rule it replaced (one total order: the later Kafka timestamp, then topic, partition and offset; one sort), on
the same stage and target, in the same run.

A stage of --rows rows like a pipeline's (topic, partition, "offset", kafka_timestamp, k, v; two partitions,
timestamps drawn at random so producers' clocks go back), keyed by k with --keys distinct keys (so most keys have
several staged versions), into a target that already holds half the keys. Each round runs each statement in a
transaction of its own that is rolled back (the target vacuumed after), the two in turn (alternating which goes
first), --repeat rounds; prints each round, then the medians and the ratio new/old. Needs `streamfill stack up`;
works in the stack's offsets_db database and drops its tables when it ends or fails.

    .venv/bin/python bench/version_order.py [--rows 500000] [--keys 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from cleanup import measured

VERSION = ("kafka_timestamp", "topic", "partition", "offset")


def statements(stage: str, target: str):
    """(the statement of the old total order, the statement of the rule in force), over the same stage."""
    from psycopg2 import sql

    from streamfill.connectors.postgres import versions

    rows = sql.SQL("FROM {} WHERE true").format(sql.Identifier(stage))
    into = sql.SQL("INSERT INTO {} AS t (topic, partition, \"offset\", kafka_timestamp, k, v) ").format(
        sql.Identifier(target))
    columns = sql.SQL('topic, partition, "offset", kafka_timestamp, k, v')
    update = sql.SQL(" ON CONFLICT (k) DO UPDATE SET topic = EXCLUDED.topic, partition = EXCLUDED.partition, "
                     '"offset" = EXCLUDED."offset", kafka_timestamp = EXCLUDED.kafka_timestamp, v = EXCLUDED.v ')

    def side(alias: str) -> versions.Side:
        return versions.Side(sql.SQL(alias), VERSION, ("timestamptz",))

    order = sql.SQL(", ").join(sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(v)) for v in VERSION)
    old = (into + sql.SQL("SELECT DISTINCT ON (k) ") + columns + sql.SQL(" ") + rows + sql.SQL(" ORDER BY k, ")
           + order + update + sql.SQL("WHERE ({}) <= ({}) IS NOT FALSE").format(
               versions.ranked(side("t")), versions.ranked(side("EXCLUDED"))))
    new = (into + sql.SQL("SELECT ") + columns + sql.SQL(" FROM ({}) AS w").format(
        versions.newest_per_key(rows, ("k",), VERSION)) + update
        + sql.SQL("WHERE {} IS NOT FALSE").format(versions.newer(side("t"), side("EXCLUDED"))))
    return old, new


def measure(args, settings, made) -> None:
    import psycopg2

    from streamfill.connectors.postgres.connection import dsn

    run = uuid.uuid4().hex[:8]
    stage, target = made.table(f"bench_order_stage_{run}"), made.table(f"bench_order_target_{run}")
    conn = psycopg2.connect(dsn(settings.offsets_db_url), application_name="bench-version-order")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for table in (stage, target):
                cur.execute(f'CREATE TABLE "{table}" (topic text, partition integer, "offset" bigint, '
                            "kafka_timestamp timestamptz, k text, v text)")
            cur.execute(f'INSERT INTO "{stage}" SELECT %s, n %% 2, n / 2, '
                        "timestamptz '2026-12-07' + random() * interval '100 seconds', 'k' || (random() * %s)::int, "
                        "'v' || n FROM generate_series(0, %s - 1) AS n", ("events", args.keys, args.rows))
            cur.execute(f'INSERT INTO "{target}" SELECT DISTINCT ON (k) * FROM "{stage}" '
                        "WHERE hashtext(k) % 2 = 0 ORDER BY k")
            cur.execute(f'CREATE UNIQUE INDEX ON "{target}" (k)')
            cur.execute(f'ANALYZE "{stage}"; ANALYZE "{target}"')
        old, new = statements(stage, target)
        times: dict[str, list[float]] = {"old": [], "new": []}
        conn.autocommit = False
        for round_ in range(args.repeat):
            pair = [("old", old), ("new", new)]
            for name, statement in pair if round_ % 2 == 0 else pair[::-1]:
                with conn.cursor() as cur:
                    started = time.perf_counter()
                    cur.execute(statement)
                    times[name].append(time.perf_counter() - started)
                conn.rollback()
                conn.autocommit = True  # what the rolled-back statement left in the target's heap and index goes
                with conn.cursor() as cur:
                    cur.execute(f'VACUUM "{target}"')
                conn.autocommit = False
            print(f"round {round_ + 1}: old {times['old'][-1]:.3f} s, new {times['new'][-1]:.3f} s", flush=True)
        old_s, new_s = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{args.rows:,} staged rows of {args.keys:,} keys, half of them in the target: the merging move took "
              f"{old_s:.3f} s with one total order, {new_s:.3f} s with Kafka's order within a partition "
              f"(medians of {args.repeat}); new/old {new_s / old_s:.2f}")
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    measured(measure, ap.parse_args())


if __name__ == "__main__":
    main()

"""`make soak SECONDS=3600`: new seeds until the time is up, against a PostgreSQL of the soak's own (the local
stack's binaries; `streamfill stack up` installs them), and a local SparkSession started when a drawn scenario
first parses its records. Prints each failing seed with its scenario (add it to tests/checker/regressions.py),
then the count of runs, faults and checked offsets, of the streams started at a consumer group's offsets (through
the stack's Kafka) and of the runs read through the parse, by encoding; exits 1
when any run broke an invariant."""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
import uuid

os.environ.setdefault("STREAMFILL_PG_SSLMODE", "verify-full")  # as every test connects: the stack's CA verifies


def main(argv: list[str]) -> int:
    from streamfill.settings import Settings
    from tests.checker.harness import Run, Tally, Violation
    from tests.checker.scenario import draw
    from tests.private_services import private_postgres

    parser = argparse.ArgumentParser(prog="make soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--first-seed", type=int, default=None, help="default: drawn from the clock")
    parser.add_argument("--without-kafka", action="store_true", help="no commitToGroup mirrors (no broker needed)")
    parser.add_argument("--seeds", type=int, default=None, help="run this many seeds, however long they take "
                        "(to replay one: --first-seed N --seeds 1)")
    args = parser.parse_args(argv)
    seed = first = args.first_seed if args.first_seed is not None else random.SystemRandom().randrange(10**6, 10**9)
    settings = Settings()
    tally, failed = Tally(), []
    sessions: list = []  # the SparkSession parsed tables are read in, started when a drawn scenario first needs it

    def spark():
        if not sessions:
            from streamfill.cli.stack.spark import Spark
            from streamfill.spark_jobs.session import spark_session

            Spark(settings).prepare()
            sessions.append(spark_session("streamfill-soak", settings, {
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}))
        return sessions[0]
    print(f"soak: seeds from {seed} " + (f"({args.seeds})" if args.seeds else f"for {args.seconds:.0f} s"),
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop its PostgreSQL and report
    try:
        with private_postgres(settings, range(settings.pg_port + 200, settings.pg_port + 220)) as postgres:
            deadline = time.monotonic() + args.seconds
            while (time.monotonic() < deadline) if args.seeds is None else (tally.runs + len(failed) < args.seeds):
                try:
                    Run(draw(seed), postgres, f"t_{uuid.uuid4().hex[:10]}", None if args.without_kafka else settings,
                        tally=tally, spark=spark).run()
                except Violation as exc:
                    failed.append(seed)
                    print(f"VIOLATION at seed {seed}: {exc}", flush=True)
                if tally.runs and tally.runs % 25 == 0:
                    print(f"soak: {tally.runs} runs, {tally.faults} faults, {tally.offsets:,} offsets checked",
                          flush=True)
                seed += 1
    finally:
        for session in sessions:
            session.stop()
        print(f"soak: {tally.runs} runs (seeds {first} to {seed - 1}), {tally.faults} faults injected, "
              f"{tally.batches} batches committed, {tally.offsets:,} committed offsets checked, {len(failed)} "
              "violations" + (f" (seeds {', '.join(map(str, failed))})" if failed else ""), flush=True)
        print(f"soak: {tally.group_starts} streams started at a consumer group's offsets", flush=True)
        for drawn, runs in sorted(tally.encodings.items()):
            print(f"soak: {runs} runs read through the parse, {drawn}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

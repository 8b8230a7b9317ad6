"""offsets_db as history grows: the same micro-batch commit and the same page, against an empty offsets_db.

The levels are 0, 10^4, 10^5, 10^6 and 10^7 batches of a stream's history. 10^7 batches of a 1 s trigger are
116 days (a year would be 3.2 * 10^7): the worst case of a job whose history no retention pruned.

The history is synthesized by set-based SQL (generate_series, as bench/ui_queries.py does) into a scratch
database: one stream job reading 4 topics of 1 partition each, a batch a second, 5,000 offsets per topic per
batch (4 batch_offsets rows per batch), a dead letter every 5th batch, a quality result every 200th, a new run
every 3 days, 5 data-loss events, and 4 other jobs for the overview. The levels grow in steps: going from 10^6
to 10^7 adds 9 * 10^6 batches after those already there, in chunks of --chunk with progress printed, then
VACUUM ANALYZE (the state autovacuum keeps a long-running database in). Batches are a second apart and the
last one the run makes is at the run's start.

At each level, side by side with a second scratch database whose job has no history at all (the empty
offsets_db, measured in the same minutes, so the machine's changes of speed cancel out in the ratios):

1. The micro-batch's offsets_db work as a running `streamfill_kafka` -> `streamfill_postgres` stream does it,
   each batch continuing the job's history: the launch holds the job (lease, run); the source records the plan
   (`JobTracker.record`); tasks stage 20,000 rows, one a dead letter, with the sink's own COPY path (4 writes,
   one per topic; not timed); the driver commits (`commit`: rows, dead letter, offsets, snapshot and commit
   number in one transaction); the source's commit hook runs (`JobTracker.committed_by_spark`). Median and p95
   of --repeat batches per side, after --warmup, the two sides alternating.
2. The page: every endpoint bench/ui_queries.py times, in-process, median of --repeat rounds per endpoint. The
   page's clock is pinned to the history's last second, so at every level it shows a job running now. Its 1h,
   24h and 7d windows hold up to 3,600, 86,400 and 604,800 batches at a 1 s trigger: up to 10^6 the windows
   grow with the levels, from 10^6 to 10^7 only the history behind them does ("x prev": the slowest endpoint
   against itself one level before).

Prints each level as it is measured, then the curve, the calls and endpoints per level, a verdict against the
target (within 1.2x of the empty offsets_db) and, after a run short of 10^7, the time and disk 10^7 would take
(try `--max 100000` first). Needs `streamfill stack up`; both databases are dropped at the end.

    .venv/bin/python bench/growth.py [--levels 0,10000,100000,1000000,10000000] [--max N] [--repeat 20]
"""

from __future__ import annotations

import argparse
import logging
import time
from datetime import datetime, timedelta, timezone

from cleanup import scratch_database
from rich.console import Console
from shared.growth_history import PER, REDATE, Step, Timeline, run_sql, scalar, setup, synthesize
from shared.growth_page import measure_page, page_paths
from shared.growth_report import WEEK_S, Level, curve, level_line, per_call, per_endpoint, projection, verdict
from shared.growth_sides import Side, measure_commits, reset_control
from sqlalchemy import create_engine, make_url
from ui_queries import page_client

from streamfill.settings import get_settings

console = Console()
if not console.is_terminal:
    console.width = 160  # the curve's table is wide; a pipe or a file would get 80 columns

LEVELS = (0, 10_000, 100_000, 1_000_000, 10_000_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)),
                    help="batches of history to measure at, increasing (default %(default)s)")
    ap.add_argument("--max", type=int, help="only the levels up to this many batches")
    ap.add_argument("--repeat", type=int, default=20, help="batches committed and page rounds per level")
    ap.add_argument("--warmup", type=int, default=2, help="batches committed per level before those measured")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="batches synthesized per transaction")
    args = ap.parse_args()
    wanted = sorted({int(x.replace("_", "")) for x in args.levels.split(",") if x.strip()})
    wanted = [n for n in wanted if args.max is None or n <= args.max]
    if not wanted:
        raise SystemExit("no level to measure (--levels, --max)")
    from streamfill.offsets_db.engine import dispose_shared
    from streamfill.orchestration.ui import db

    def close() -> None:
        dispose_shared()
        if db._engine is not None:
            db._engine.dispose()
            db._engine = None

    settings = get_settings()
    per_level = args.warmup + args.repeat
    # the timeline ends at the run's start, at the last batch the run makes (the last level's commits included)
    timeline = Timeline(datetime.now(timezone.utc).replace(microsecond=0), wanted[-1] + len(wanted) * per_level)
    levels: list[Level] = []
    steps: list[Step] = []
    # everything the run makes lives in two databases of its own; it touches no topic and no user table
    with scratch_database(settings, "streamfill_bench_growth", before_drop=close) as url, \
            scratch_database(settings, "streamfill_bench_growth_empty", before_drop=close) as empty_url:
        console.print(f"history in {make_url(url).database}, the empty side in {make_url(empty_url).database}; "
                      f"levels {', '.join(f'{n:,}' for n in wanted)}", highlight=False)
        job_id = setup(url)
        setup(empty_url)
        engine = create_engine(url)
        max_wal = scalar(engine, "SHOW max_wal_size")
        client = page_client()
        # Airflow's import sets the root logger to INFO on stdout: the figures would drown in request lines
        logging.getLogger().setLevel(logging.WARNING)
        main, control = Side(url), Side(empty_url)
        have = 0
        for level in wanted:
            if level > have:
                console.print(f"synthesizing batches {have + 1:,} to {level:,}", highlight=False)
                steps.append(synthesize(url, job_id, have, level, args.chunk, timeline))
                have = level
            measuring = time.perf_counter()
            reset_control(empty_url)
            newest = scalar(engine, "SELECT coalesce(max(seq), 0) FROM {batches} WHERE job_id = :j", j=job_id)
            clock = timeline.at(newest) + timedelta(seconds=1) if newest else None
            in_week = scalar(engine, "SELECT count(*) FROM {batches} WHERE job_id = :j AND planned_at >= :since",
                             j=job_id, since=(clock or timeline.anchor) - timedelta(seconds=WEEK_S))
            page = measure_page(client, [(url, clock), (empty_url, None)],
                                page_paths((newest // 2) * PER + 17), args.repeat)
            for side in (main, control):
                side.times = {k: [] for k in side.times}
            measure_commits(main, control, args.warmup, args.repeat)
            with engine.begin() as conn:  # this level's commits join the timeline after the history they followed
                run_sql(conn, REDATE, job_id=job_id, s1=newest + 1, s2=newest + per_level, **timeline.params())
            lv = Level(level, scalar(engine, "SELECT count(*) FROM {batch_offsets}"), in_week,
                       scalar(engine, "SELECT pg_database_size(current_database())"),
                       *((main.times[k], control.times[k]) for k in ("plan", "commit", "hook")),
                       (page[url], page[empty_url]))
            levels.append(lv)
            console.print(level_line(lv) + f"; measured in {time.perf_counter() - measuring:,.0f} s", highlight=False)
        engine.dispose()
        close()
    console.print(curve(levels, args.repeat))
    console.print(per_call(levels))
    console.print(per_endpoint(levels))
    console.print(verdict(levels), highlight=False)
    if steps and wanted[-1] < 10_000_000:
        console.print(projection(steps, max_wal), highlight=False)


if __name__ == "__main__":
    main()

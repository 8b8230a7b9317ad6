"""What a backfill launch does, decided against the broker and offsets_db before anything is read (a new plan, the
recorded one resumed, a new pass, or nothing left), and its plan recorded."""

from __future__ import annotations

import time
from dataclasses import dataclass

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.postgres.sink_options import APPEND_NEW
from streamfill.errors import OptionError, StreamfillError
from streamfill.offsets_db.store import OffsetStore
from streamfill.partitions import TopicPartition
from streamfill.spark_jobs.backfill_args import BackfillArgs
from streamfill.spark_jobs.backfill_plan import Window, parse_spec, progress, remaining, resolve_window


@dataclass(frozen=True)
class Prepared:
    window: Window
    done: dict[TopicPartition, int]
    state: str  # "new", "resuming", "new pass" or "complete"
    config: dict | None = None  # the job's config to record before reading; None: nothing to record
    restart: bool = False  # a new plan: the job starts over from it


def check_job(args: BackfillArgs, store: OffsetStore) -> None:
    """A backfill under a stream's name would move the stream's snapshot: refused before anything runs."""
    if store.job_kind(args.job) == "stream":
        raise OptionError("--job", args.job, "is a stream job in offsets_db",
                          f"a backfill needs a name of its own, e.g. {args.job}-backfill")


def resolve(args: BackfillArgs, broker: Broker, now_ms: int | None = None) -> Window:
    """--from/--to to concrete ranges, every check made against the broker before Spark starts."""
    from_spec = parse_spec(args.from_, "--from", args.topic)
    to_spec = parse_spec(args.to, "--to", args.topic)
    topics = broker.readable([args.topic])
    parts = [TopicPartition(args.topic, p) for p in range(topics.get(args.topic, 0))]
    watermarks = broker.watermarks(parts) if parts else {}
    return resolve_window(args.topic, topics.get(args.topic), watermarks, broker.offsets_for_times, from_spec, to_spec,
                          now_ms if now_ms is not None else int(time.time() * 1000), raw_from=args.from_,
                          raw_to=args.to, known_topics=sorted(topics))


def prepare(args: BackfillArgs, broker: Broker, store: OffsetStore) -> Prepared:
    """Decide what this launch does; nothing is read or recorded yet (`record` does that, once every argument,
    the table included, is checked)."""
    prior = store.job_config(args.job).get("backfill")
    snap = store.snapshot(args.job)
    if prior:
        old = Window.from_json(prior["window"])
        old_done = progress(old, snap)
        unfinished = remaining(old, old_done) > 0
        same = {k: prior.get(k) for k in args.recorded()} == args.recorded()
        if same and unfinished:  # the recorded plan, not a new resolution
            return Prepared(old, old_done, "resuming", {"backfill": {**prior, "mode": args.mode}})
        if unfinished:
            raise StreamfillError(
                f"job {args.job!r} has an unfinished backfill of topic {prior['topic']!r} from {prior['from']!r} "
                f"to {prior['to']!r} into {prior['table']!r} ({remaining(old, old_done):,} offsets left). Re-run it "
                "with those arguments to finish it, or give this backfill a new --job name")
    window = resolve(args, broker)
    if prior and window == Window.from_json(prior["window"]) and prior["table"] == args.table \
            and args.mode == APPEND_NEW:
        return Prepared(window, {tp: e for tp, (_, e) in window.bounds.items()}, "complete")
    # a pass's number and the batch before it: what this pass committed, and whether it is a re-run, stay facts
    # of offsets_db (the window's asset event reports them: offsets_db.announcements.newest_pass)
    number = (prior.get("pass", 1) + 1) if prior else 1
    since = store.last_batch_id(args.job) if prior else 0
    return Prepared(window, {tp: s for tp, (s, _) in window.bounds.items()}, "new pass" if prior else "new",
                    {"backfill": {**args.recorded(), "mode": args.mode, "window": window.to_json(),
                                  "pass": number, "since_batch": since}}, restart=True)


def record(args: BackfillArgs, prep: Prepared, store: OffsetStore) -> None:
    """The plan into offsets_db: from here on a re-run with other arguments is refused until this one finishes."""
    if prep.config is not None:
        store.ensure_job(args.job, "backfill", prep.config, restart=prep.restart)

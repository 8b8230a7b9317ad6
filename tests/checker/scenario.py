"""One run of the checker, drawn from a seed: who writes the table and how, what its users do meanwhile, and
which fault strikes which batch. Pure: the same seed always draws the same scenario and the same records.

The space (docs/guarantees.md, "Guarantees at every intersection"):
- writers: one or two on one table, their batches read by a task per partition or by one task for all
  (maxPartitions); each a stream (a job, one stage kept across batches), a backfill or a
  window replay (a job, a bounded write that names where its batch ends) or a `df.write` without a job; dead
  letters on or off; `evolveSchema` from one of its batches on (a column `extra` appears, of text or of whole
  numbers widened from int to bigint from the writer's next batch); a job's commits
  mirrored to a consumer group (`commitToGroup`) through the cluster's PLAINTEXT or SASL_SSL listener; a stream
  that starts past the first offsets (`start: latest` or a time), its start kept in offsets_db before any batch;
  a stream that starts at a stopped Kafka Connect sink's consumer group (`start: group:NAME`), each partition's
  committed offset none (earliest), within the log or at its end: refused while the group has a live member and
  when the group committed nothing it reads, nothing kept; its first launch's start kept, and every later launch
  (after a fault, a stop or a launch killed once its start is kept) starting there while the group moves;
- the table: `append-new` on the Kafka coordinates, or `replace` on the coordinates or on a key `k` whose
  versions cross partitions, jobs and batches, some without a Kafka timestamp; a keyed `replace` table whose
  records may be tombstones (`deletes`), a delete ordered with the key's versions and recorded against replays;
  a keyed `replace` table whose versions are ordered between partitions by a version column first (a change
  event's source position, or a `versionColumn` of whole numbers or of times), versions beyond a double's
  precision, some missing, disagreeing with Kafka's order; every record's Kafka timestamp drawn at random, so
  producers' clocks go back within a partition, where the offset decides; a table whose
  topic is routed (`routes`): some records go to a second table (append-new), in the same transaction;
- what Kafka carries (a keyed table that is not routed): the records as the table's own rows, or encoded as
  Kafka's producers and connectors send them and read by the production parse (compile.parse) of a pipeline
  entry (`Encoding`, tests/checker/kafka_forms.py): a `deletes: tombstone` JSON entry, each record's Kafka key a
  JSON object, a JSON string, plain text or Kafka Connect's JsonConverter wrapper around an object or a string, a
  tombstone a null value; or a `format: debezium` entry, each record an event (op c, r or u, d with its `before`,
  or without it naming its row by the Kafka key, or a null tombstone with `deletes: tombstone`) through
  JsonConverter with its schema or without it (read by the entry's `debezium:` settings), its amount a Connect
  Decimal and its times MicroTimestamps, its position at `source.lsn`, by the connector, or in the row image
  (`after.seq`, `before.seq`); poison records values the parse refuses (invalid JSON, a bad base64, an unknown
  op, a key that names no row);
- users: deletes, updates, a CHECK that refuses long values (and its removal), an insert trigger, a column
  added by hand, a long REPEATABLE READ reader; a dashboard probes the table throughout;
- faults: PostgreSQL crashed between two tasks' COPYs or after a commit, or down when the driver commits (an
  outage), a task's Python worker lost after it staged (its retry staged again), the driver killed before its
  commit or after it (the batch replayed);
- maintenance: offsets_db's history pruned (`streamfill db prune` at ages of a millisecond) after some steps.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from streamfill.connectors.postgres.sink_options import APPEND_NEW, REPLACE

STREAM, BACKFILL, WRITE = "stream", "backfill", "write"  # WRITE: a df.write without a job
PATHS = (STREAM, BACKFILL, WRITE)

CRASH_BETWEEN_TASKS = "postgres crashed between two tasks' COPY"
LOST_WORKER = "a task's Python worker lost after it staged"
KILLED_BEFORE_COMMIT = "the driver killed before its commit"
KILLED_AFTER_COMMIT = "the driver killed after its commit"
CRASH_AFTER_COMMIT = "postgres crashed after a commit"
DOWN_AT_COMMIT = "postgres down at the commit"  # an outage, not a bad record: the batch fails and is replayed
# a stream stopped (SIGTERM, its task's end) while its batch is in flight, at a point of the stop grace
STOP_IN_GRACE = "stopped, the batch committing within the stop grace"
STOP_AT_GRACE_END = "stopped, the stop grace running out as the batch commits"
STOP_PAST_GRACE = "stopped, the stop grace running out before the batch commits"
STOPS = (STOP_IN_GRACE, STOP_AT_GRACE_END, STOP_PAST_GRACE)
FAULTS = (CRASH_BETWEEN_TASKS, LOST_WORKER, KILLED_BEFORE_COMMIT, KILLED_AFTER_COMMIT, CRASH_AFTER_COMMIT,
          DOWN_AT_COMMIT)
JOBLESS_FAULTS = (CRASH_BETWEEN_TASKS, LOST_WORKER, DOWN_AT_COMMIT)

DELETE, UPDATE, CHECK_ON, CHECK_OFF, TRIGGER, COLUMN_BY_HAND, READER = (
    "delete", "update", "check on", "check off", "trigger", "column by hand", "reader")
ACTIONS = (DELETE, UPDATE, CHECK_ON, CHECK_OFF, TRIGGER, COLUMN_BY_HAND, READER)

PRUNE = "offsets_db pruned, every age a millisecond"

PARTITIONS = 2
LONG = "L" * 12  # a value the user's CHECK (length(v) < 10) refuses
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


PLAINTEXT, SASL_SSL = "PLAINTEXT", "SASL_SSL"  # the listener of a job's commitToGroup mirror
OAUTH = "OAUTH"  # the stack's OAUTHBEARER listener: a SASL mirror that logs in with tokens


MISSING, MID_LOG, LOG_END = "none", "mid-log", "at the log end"  # a partition's committed offset in a start's group


@dataclass(frozen=True)
class GroupStart:
    """A stream's `start: group:NAME` (`startingGroup`): the consumer group of a stopped Kafka Connect sink, read
    once by the job's first launch and kept in offsets_db as its position before any batch."""

    log_end: tuple[int, ...]  # per partition, the records the topic holds when the job first launches
    committed: tuple[int | None, ...]  # per partition, the group's committed offset (None: none, start at earliest)
    member: bool  # a live member (a running connector) at the first launch: refused, nothing kept, until it leaves
    killed: bool  # the first launch killed once its start is kept, before its first batch is planned
    listener: str  # the listener the launch reads the group through (the job's one: its mirror's, if it has one)

    @property
    def refused(self) -> bool:
        """The group committed nothing the stream reads: the launch is refused, and the user starts at earliest
        instead, as the refusal says."""
        return all(c is None for c in self.committed)

    def first(self, partition: int) -> int:
        """Where the stream starts in the partition: the group's committed offset, else earliest."""
        committed = self.committed[partition]
        return 0 if committed is None else committed

    def describe(self) -> str:
        kinds = ", ".join(f"p{p} {'none (earliest)' if c is None else f'{c} of {e}'}"
                          for p, (c, e) in enumerate(zip(self.committed, self.log_end)))
        return (f"starts at a Kafka Connect group's offsets ({kinds}) read over {self.listener}"
                + (", refused (no committed offset), then started at earliest" if self.refused else "")
                + (", a live member at the first launch" if self.member else "")
                + (", its first launch killed once its start is kept" if self.killed else ""))


@dataclass(frozen=True)
class Writer:
    path: str
    dead_letters: bool
    evolve_from: int | None  # the writer's batch from which its rows carry the column `extra` (evolveSchema)
    mirror: str | None = None  # commitToGroup through the cluster's PLAINTEXT or SASL_SSL listener
    # a stream's first offset in each partition, its `start` resolved by its first launch (0: earliest); out of
    # repr, so the scenarios of seeds that draw none keep their fingerprints
    start: int = field(default=0, repr=False)
    # a SASL mirror's login: OAUTHBEARER tokens on the stack's OAUTH listener instead of SCRAM on SASL_SSL; out of
    # repr like `start`
    tokens: bool = field(default=False, repr=False)
    # its batches read by one task for all partitions, as a stream's maxPartitions packs small ranges on a
    # machine of one core; out of repr like `start`
    packed: bool = field(default=False, repr=False)
    # a df.write without `deletes` into a table whose records delete (a second entry, a user's write): refused once
    # a delete of the table is recorded, writing as any upsert before; out of repr like `start`
    deletes_off: bool = field(default=False, repr=False)
    # a stream that starts at a consumer group's committed offsets; out of repr like `start`
    group: GroupStart | None = field(default=None, repr=False)

    def first(self, partition: int) -> int:
        """The writer's first offset in the partition: its start, or its group's."""
        return self.group.first(partition) if self.group else self.start

    @property
    def pins(self) -> bool:
        """Its first launch keeps its start in offsets_db before any batch (any start but earliest)."""
        return bool(self.start) or (self.group is not None and not self.group.refused)

    @property
    def listener(self) -> str | None:
        """The listener the mirror commits through."""
        return OAUTH if self.tokens else self.mirror

    @property
    def job(self) -> bool:
        return self.path != WRITE


TOMBSTONE_KEYS, DEBEZIUM = "tombstone keys", "debezium"  # the encodings of a parsed table
NO_POSITION = "none"  # a Debezium entry's `position: none`: its versions ordered by a column or by Kafka's
# a Debezium entry's position: by the event's connector (postgresql: source.lsn), or named, in `source` or in the
# row image of the op
POSITION_PATHS = (None, "source.lsn", "after.seq", "before.seq")
SEMANTIC_COLUMNS = ("amount", "at")  # a parsed table's columns of Connect's Decimal and Debezium's MicroTimestamp
UNIT_SETTINGS = ("semantic.types", "time.precision.mode")  # how a Debezium entry's `debezium:` names MicroTimestamp


@dataclass(frozen=True)
class Encoding:
    """How a parsed table's records travel through Kafka, and the entry whose parse reads them
    (tests/checker/kafka_forms.py)."""

    kind: str  # TOMBSTONE_KEYS or DEBEZIUM
    position: str | None = None  # DEBEZIUM: the entry's `position:` (POSITION_PATHS, or NO_POSITION)
    # DEBEZIUM: the entry's `debezium:` gives the times' unit this way (UNIT_SETTINGS), so events come with their
    # schema or without; None: every event comes with its schema
    settings: str | None = None
    tombstones: bool = False  # DEBEZIUM with NO_POSITION: `deletes: tombstone`, some deletes a null value

    @property
    def row_position(self) -> bool:
        """The position is a field of the op's row image."""
        return self.position is not None and self.position.split(".")[0] in ("after", "before")

    @property
    def by_position(self) -> bool:
        """The events carry the versions' order (a Debezium entry with a position): every record has one."""
        return self.kind == DEBEZIUM and self.position != NO_POSITION


@dataclass(frozen=True)
class Table:
    mode: str  # APPEND_NEW or REPLACE
    keyed: bool  # keyColumns=k (replace only); otherwise the default key, the Kafka coordinates
    # keyed replace: some records are tombstones that delete their key's row; out of repr like Writer.start
    deletes: bool = field(default=False, repr=False)
    positioned: bool = field(default=False, repr=False)  # keyed replace: rows carry a version column
    # a positioned table's version column: a change event's source_position (numeric), or a column the write names
    # as versionColumn, of whole numbers (bigint) or of times (timestamptz, positions as microseconds)
    version_column: str = field(default="source_position", repr=False)
    routed: bool = field(default=False, repr=False)  # some records go to a second table, `<table>_side`
    # the column `extra` holds whole numbers, written as int until a writer's second evolved batch, then as
    # bigint: the sink widens the column while the dashboard probes the table
    widens: bool = field(default=False, repr=False)
    # keyed, not routed: the records encoded as Kafka carries them and read by the production parse (None: staged
    # as the table's rows); out of repr like the others
    encoding: Encoding | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Write:
    """One batch of a writer: per partition, offsets [start, end)."""

    writer: int
    number: int  # the writer's n-th batch, from 0
    ranges: tuple[tuple[int, int, int], ...]  # (partition, start, end)
    fault: str | None
    # a stream's stop while the batch is in flight (STOPS): the stop grace's timer against the commit; out of repr,
    # so the fingerprints of seeds drawn before stay
    stop: str | None = field(default=None, repr=False)
    # a table whose records delete: another deleting commit holds the table's deletes for longer than one try of
    # the lock while this batch commits (a neighbour's slow commit); out of repr like `stop`
    neighbour: bool = field(default=False, repr=False)


@dataclass(frozen=True)
class Action:
    kind: str
    arg: int


@dataclass(frozen=True)
class Scenario:
    seed: int
    table: Table
    writers: tuple[Writer, ...]
    steps: tuple[Write | Action, ...]
    # the steps after which offsets_db's history is pruned; out of repr, so fingerprints stay as they were
    prunes: tuple[int, ...] = field(default=(), repr=False)

    def describe(self) -> str:
        lines = [f"seed {self.seed}: table {self.table.mode}{' keyed by k' if self.table.keyed else ''}"
                 + (", tombstones delete" if self.table.deletes else "")
                 + (f", ordered by {self.table.version_column} between partitions" if self.table.positioned else "")
                 + (", some records routed to a second table" if self.table.routed else "")
                 + (", extra widened from int to bigint" if self.table.widens else "")
                 + (f", {describe_encoding(self.table.encoding)}" if self.table.encoding else "")]
        lines += [f"  writer {i}: {w.path}, dead letters {'on' if w.dead_letters else 'off'}"
                  + (f", evolveSchema from batch {w.evolve_from}" if w.evolve_from is not None else "")
                  + (f", commitToGroup over {w.mirror}" if w.mirror else "")
                  + (f", starts at offset {w.start}" if w.start else "")
                  + (f", {w.group.describe()}" if w.group else "")
                  + (", one task reads all partitions" if w.packed else "")
                  + (", without deletes" if w.deletes_off else "")
                  for i, w in enumerate(self.writers)]
        for i, step in enumerate(self.steps):
            if isinstance(step, Write):
                size = sum(e - s for _, s, e in step.ranges)
                lines.append(f"  writer {step.writer} batch {step.number}: {size} records"
                             + (f", {step.fault}" if step.fault else "") + (f", {step.stop}" if step.stop else "")
                             + (", a neighbour's deleting commit holds the table's deletes" if step.neighbour
                                else ""))
            else:
                lines.append(f"  user: {step.kind} ({step.arg})")
            if i in self.prunes:
                lines.append(f"  {PRUNE}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str
    stamp: datetime | None  # the Kafka timestamp; None for a record without one
    value: str
    poison: bool  # its parse failed: a dead letter of the pipeline (dead letters on only)
    tomb: bool = field(default=False, repr=False)  # a tombstone: its value null, it deletes its key's row
    position: int | None = field(default=None, repr=False)  # its source position (a positioned table)
    side: bool = field(default=False, repr=False)  # routed to the second table (a routed table)

    # a parsed table's columns of a Connect semantic type, derived from the record's coordinates: a decimal(10,2)
    # of either sign and up to ten digits, and a time from 1653 to 2286 (before the epoch too)
    @property
    def amount(self) -> Decimal:
        unscaled = (self.offset * 7_919_999_861 + self.partition * 104_729) % 19_999_999_999 - 9_999_999_999
        return Decimal(unscaled).scaleb(-2)

    @property
    def at(self) -> datetime:
        micros = (self.offset * 86_400_000_123_457 + self.partition * 9_999_991) % (2 * 10**16) - 10**16
        return EPOCH + timedelta(microseconds=micros)


POISON_RUN = 8  # poison comes alone or in runs of this many offsets: a small task may stage only dead letters


POSITION_BASE = 2**62  # positions above 2**53 that differ in their last digits: a double would tie them
VERSION_COLUMNS = ("source_position", "seq", "seq_at")  # a positioned table's: numeric, bigint, timestamptz


def version_value(column: str, position: int | None):
    """A record's version as its table's version column holds it: a source position as a decimal, a sequence as a
    whole number, a time as T0 plus the position's last digits in microseconds."""
    if position is None:
        return None
    if column == "seq_at":
        return T0 + timedelta(microseconds=position - POSITION_BASE)
    return Decimal(position) if column == VERSION_COLUMNS[0] else position


def record(seed: int, writer: int, dead_letters: bool, partition: int, offset: int, tombstones: bool = False,
           positioned: bool = False, routed: bool = False, encoding: Encoding | None = None) -> Record:
    """The record at this offset of the writer's topic: the same for the same seed, whoever asks. With an
    `encoding`, the record as Kafka can carry it: a Debezium entry's events each have a position when it reads
    one, and a delete has a version column only from a `d` event's `before` that has it."""
    rng = random.Random(f"{seed}/{writer}/{partition}/{offset}")
    stamp = None if rng.random() < 0.15 else T0 + timedelta(milliseconds=rng.randrange(100_000))
    value = LONG if rng.random() < 0.05 else f"v{offset}"
    in_run = random.Random(f"{seed}/{writer}/{partition}/run {offset // POISON_RUN}").random() < 0.05
    poison = dead_letters and (in_run or rng.random() < 0.04)
    key = f"k{rng.randrange(12)}"
    tomb = tombstones and not poison and random.Random(f"{seed}/{writer}/{partition}/{offset}/tomb").random() < 0.15
    position = None
    if positioned:
        places = random.Random(f"{seed}/{writer}/{partition}/{offset}/position")
        position = None if places.random() < 0.1 else POSITION_BASE + places.randrange(40)
        if encoding is not None and encoding.by_position and position is None:
            position = POSITION_BASE + places.randrange(40)
        elif encoding is not None and not encoding.by_position and tomb and (encoding.kind != DEBEZIUM or random.Random(
                f"{seed}/{writer}/{partition}/{offset}/delete version").random() < 0.5):
            position = None  # a tombstone, or a `d` whose `before` has no version column
    side = routed and not poison and random.Random(f"{seed}/{writer}/{partition}/{offset}/side").random() < 0.3
    return Record(partition, offset, key, stamp, None if tomb else value, poison, tomb, position, side)


def draw(seed: int, steps: int | None = None) -> Scenario:
    rng = random.Random(seed)
    mode = rng.choice((APPEND_NEW, REPLACE))
    keyed = mode == REPLACE and rng.random() < 0.7
    table = Table(mode, keyed, deletes=keyed and random.Random(f"{seed}/tombs").random() < 0.5,  # apart
                  positioned=keyed and random.Random(f"{seed}/positions").random() < 0.4)
    if table.positioned:  # drawn apart, as every later draw: the seeds drawn before draw as they did
        table = replace(table, version_column=random.Random(f"{seed}/version column").choice(VERSION_COLUMNS))
    routes = random.Random(f"{seed}/two tables")
    table = replace(table, routed=not table.deletes and routes.random() < 0.3,
                    widens=random.Random(f"{seed}/widens").random() < 0.5)
    table = replace(table, encoding=draw_encoding(seed, table))
    writers = []
    for n in range(rng.choice((1, 2))):
        path = rng.choice(PATHS)
        job = path != WRITE
        mirrors = random.Random(f"{seed}/mirror/{n}")  # drawn apart: the seeds drawn before it draw as they did
        mirror = mirrors.choice((PLAINTEXT, SASL_SSL)) if job and mirrors.random() < 0.3 else None
        tokens = mirror == SASL_SSL and random.Random(f"{seed}/tokens/{n}").random() < 0.5  # apart too
        starts = random.Random(f"{seed}/start/{n}")  # drawn apart too
        start = starts.randrange(1, 400) if path == STREAM and starts.random() < 0.3 else 0
        packed = random.Random(f"{seed}/packed/{n}").random() < 0.3  # apart too
        deletes_off = table.deletes and path == WRITE and random.Random(f"{seed}/deletes off/{n}").random() < 0.5
        writer = Writer(path, dead_letters=job and rng.random() < 0.6,
                        evolve_from=rng.randrange(1, 4) if job and rng.random() < 0.3 else None,
                        mirror=mirror, start=start, tokens=tokens, packed=packed, deletes_off=deletes_off)
        writers.append(replace(writer, group=draw_group(seed, n, writer)))
    drawn: list[Write | Action] = []
    nexts = [[w.first(p) for p in range(PARTITIONS)] for w in writers]
    numbers = [0] * len(writers)
    for _ in range(steps or rng.randrange(4, 10)):
        if drawn and rng.random() < 0.35:
            drawn.append(Action(rng.choice(ACTIONS), rng.randrange(1000)))
            continue
        w = rng.randrange(len(writers))
        ranges = []
        for p in rng.sample(range(PARTITIONS), rng.choice((1, PARTITIONS))):
            size = rng.choice((rng.randrange(200, 1500), rng.randrange(1, 50), rng.randrange(1, 50),
                               rng.randrange(1, 4)))
            ranges.append((p, nexts[w][p], nexts[w][p] + size))
            nexts[w][p] += size
        faults = FAULTS if writers[w].job else JOBLESS_FAULTS
        fault = rng.choice(faults) if rng.random() < 0.35 else None
        # drawn apart, as every later draw: the seeds drawn before draw as they did
        aside = random.Random(f"{seed}/stop and neighbour/{len(drawn)}")
        stop = aside.choice(STOPS) if writers[w].path == STREAM and fault is None and aside.random() < 0.2 else None
        neighbour = table.deletes and aside.random() < 0.2
        drawn.append(Write(w, numbers[w], tuple(sorted(ranges)), fault, stop, neighbour))
        numbers[w] += 1
    drawn = killed_first(seed, writers, drawn)
    pruning = random.Random(f"{seed}/prune")  # drawn apart: the rest of the scenario draws as it did
    prunes = tuple(i for i in range(len(drawn)) if pruning.random() < 0.15)
    return Scenario(seed, table, tuple(writers), tuple(drawn), prunes)


GROUP_STARTS = 0.3  # of the streams that start at earliest, those that start at a consumer group's offsets


def draw_group(seed: int, n: int, writer: Writer) -> GroupStart | None:
    """A stream without another start may start at a Kafka Connect sink's group (drawn apart, so the seeds drawn
    before draw as they did): each partition's committed offset none, within the log or at its end."""
    rng = random.Random(f"{seed}/group start/{n}")
    if writer.path != STREAM or writer.start or rng.random() >= GROUP_STARTS:
        return None
    log_end = tuple(rng.randrange(2, 400) for _ in range(PARTITIONS))
    kinds = [rng.choice((MISSING, MID_LOG, LOG_END)) for _ in range(PARTITIONS)]
    committed = tuple(None if kind == MISSING else rng.randrange(1, end) if kind == MID_LOG else end
                      for kind, end in zip(kinds, log_end))
    return GroupStart(log_end, committed, member=rng.random() < 0.3, killed=rng.random() < 0.3,
                      listener=writer.listener or rng.choice((PLAINTEXT, SASL_SSL, OAUTH)))


def killed_first(seed: int, writers: list[Writer], steps: list[Write | Action]) -> list[Write | Action]:
    """A stream started at a group has its first batch struck by a fault more often (the relaunch must start at
    the kept position, not at the group, which moves meanwhile); drawn apart."""
    rng = random.Random(f"{seed}/group start faults")
    out = list(steps)
    for w, writer in enumerate(writers):
        first = next((i for i, s in enumerate(out) if isinstance(s, Write) and s.writer == w), None)
        if writer.group is None or first is None or out[first].fault or out[first].stop or rng.random() >= 0.5:
            continue
        out[first] = replace(out[first], fault=rng.choice(FAULTS))
    return out


def draw_encoding(seed: int, table: Table) -> Encoding | None:
    """How a keyed table's records travel (drawn apart, so the seeds drawn before draw as they did): a JSON entry
    only gives a table that deletes by tombstones (without a source position), a Debezium entry any keyed table."""
    rng = random.Random(f"{seed}/encoding")
    by_source = table.positioned and table.version_column == VERSION_COLUMNS[0]
    if not table.keyed or table.routed or rng.random() >= (0.8 if by_source else 0.6):
        return None
    kind = DEBEZIUM if by_source or not table.deletes else rng.choice((TOMBSTONE_KEYS, DEBEZIUM))
    if kind == TOMBSTONE_KEYS:
        return Encoding(kind)
    position = rng.choice(POSITION_PATHS) if by_source else NO_POSITION
    settings = rng.choice((None, *UNIT_SETTINGS))
    return Encoding(kind, position, settings, tombstones=table.deletes and position == NO_POSITION
                    and rng.random() < 0.5)


def describe_encoding(encoding: Encoding) -> str:
    if encoding.kind == TOMBSTONE_KEYS:
        return "read by a deletes: tombstone JSON entry, its Kafka keys in every documented form"
    position = {None: "by the connector", NO_POSITION: "position: none"}.get(encoding.position,
                                                                           f"position: {encoding.position}")
    schemas = f"with or without their schema (debezium: {encoding.settings})" if encoding.settings else \
        "with their schema"
    return (f"read by a format: debezium entry ({position}), events {schemas}"
            + (", tombstones delete" if encoding.tombstones else ""))


def fingerprint(scenario: Scenario) -> str:
    """A digest of the scenario and every record it writes: a regression seed pins it, so a change of the
    generator that would make the seed draw something else is noticed."""
    digest = hashlib.sha256(repr(scenario).encode())
    if any(w.start for w in scenario.writers):
        digest.update(repr([w.start for w in scenario.writers]).encode())
    if any(w.group for w in scenario.writers):
        digest.update(repr([w.group for w in scenario.writers]).encode())
    for step in scenario.steps:
        if isinstance(step, Write):
            dead_letters = scenario.writers[step.writer].dead_letters
            for p, start, end in step.ranges:
                for offset in range(start, end):
                    deletes = scenario.table.deletes and not scenario.writers[step.writer].deletes_off
                    drawn = record(scenario.seed, step.writer, dead_letters, p, offset, deletes,
                                   scenario.table.positioned, scenario.table.routed)
                    digest.update(repr(drawn).encode() + (b"tomb" if drawn.tomb else b"")
                                  + (repr(drawn.position).encode() if scenario.table.positioned else b"")
                                  + (b"side" if drawn.side else b""))
    return digest.hexdigest()[:16]

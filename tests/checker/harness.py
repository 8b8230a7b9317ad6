"""A scenario run against a real PostgreSQL through the sink's own steps, as its tasks and driver take them
(plan the write, stage each Kafka partition's rows in a task of its own, commit; abort on failure), with the
scenario's users and faults in between; then every invariant checked against the model.

The PostgreSQL is the run's own (it is crashed on purpose). Each run names what it makes after its prefix. A parsed
table's batches (scenario.Encoding) are encoded as Kafka carries them (kafka_forms) and read by the production
parse in a local SparkSession, whose rows the tasks stage as the sink's writer tasks stage Spark's Arrow batches.
A stream started at a Kafka Connect sink's consumer group launches through the source's own start (its
initialOffset) against the stack's Kafka, the connector's records, group and live member made there.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from streamfill.changes import DELETE_COLUMN, ROUTE_COLUMN, SOURCE_POSITION
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.connectors.kafka.source_declarations import STARTING_GROUP
from streamfill.connectors.postgres import postgres_sink_declarations as declared
from streamfill.connectors.postgres.connection import dsn
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.connectors.spark import postgres_commit, postgres_plan, postgres_staging
from streamfill.errors import BrokerRefused, OptionError, SinkError
from streamfill.offsets_db import deleted_keys
from streamfill.offsets_db.store import OffsetStore
from streamfill.partitions import TopicPartition
from streamfill.retention_ages import Retention
from streamfill.settings import Settings
from tests.checker import kafka_forms
from tests.checker.model import Model
from tests.checker.scenario import (
    BACKFILL,
    CHECK_OFF,
    CHECK_ON,
    COLUMN_BY_HAND,
    CRASH_AFTER_COMMIT,
    CRASH_BETWEEN_TASKS,
    DELETE,
    DOWN_AT_COMMIT,
    KILLED_AFTER_COMMIT,
    KILLED_BEFORE_COMMIT,
    LOST_WORKER,
    OAUTH,
    PARTITIONS,
    PLAINTEXT,
    READER,
    SASL_SSL,
    SEMANTIC_COLUMNS,
    STOP_AT_GRACE_END,
    STOP_PAST_GRACE,
    STREAM,
    TOMBSTONE_KEYS,
    TRIGGER,
    UPDATE,
    Action,
    Encoding,
    Record,
    Scenario,
    Write,
    Writer,
    record,
    version_value,
)

CHECK = "sf_checker_short_v"
AT_ONCE = Retention(**{kind: timedelta(milliseconds=1) for kind in Retention.kinds()})


class Violation(AssertionError):
    """An invariant broken: the message says which, with the scenario that broke it."""


@dataclass
class Tally:
    """What the checker did, for the soak's report."""

    runs: int = 0
    faults: int = 0
    offsets: int = 0  # offsets committed and checked
    batches: int = 0
    encodings: dict[str, int] = field(default_factory=dict)  # runs of parsed tables, by what their Kafka carried
    group_starts: int = 0  # streams started at a consumer group's committed offsets (through the stack's Kafka)


@dataclass
class Run:
    scenario: Scenario
    postgres: object  # app.stack.postgres.Postgres: crashed and restarted by the faults
    prefix: str
    cluster: Settings | None = None  # the stack whose Kafka commitToGroup mirrors to (None: no mirrors)
    model: Model = field(init=False)
    tally: Tally = field(default_factory=Tally)
    spark: Callable[[], object] | None = None  # gives the SparkSession a parsed table's batches are parsed in

    def __post_init__(self) -> None:
        self.url = self.postgres.settings.offsets_db_url
        self.store = OffsetStore(self.url)
        self.model = Model(self.scenario.table)
        self.table = f"{self.prefix}_tbl"
        self.side = f"{self.prefix}_side"  # a routed table's second table
        self.leases: dict[int, object] = {}
        self.readers: list[Reader] = []
        self.mirrors = Mirrors(self.cluster, self.prefix) if self.cluster is not None else None
        self.probe = Probe(self.url, self.table)
        self.parses: dict[tuple[int, int], Parsed] = {}  # (writer, batch) -> its parse, the same for every try
        self.launched: set[int] = set()  # writers started at a group whose source launched once
        self.earliest: set[int] = set()  # writers refused at their group, started at earliest instead

    def topic(self, writer: int) -> str:
        return f"{self.prefix}_w{writer}"

    def job(self, writer: int) -> str:
        return f"{self.prefix}-w{writer}"

    def group(self, writer: int) -> str:
        return f"{self.prefix}-w{writer}-lag"

    def connector(self, writer: int) -> str:
        """The consumer group of the Kafka Connect sink a stream takes over (`start: group:NAME`)."""
        return f"connect-{self.prefix}-w{writer}"

    # the run

    def run(self) -> Tally:
        self.probe.start()
        try:
            for i, step in enumerate(self.scenario.steps):
                if isinstance(step, Write):
                    self.write(step)
                else:
                    self.act(step)
                if i in self.scenario.prunes:
                    self.prune()
        except Violation:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of streamfill's is a finding, with its scenario
            raise Violation(f"{type(exc).__name__}: {exc}\n{self.scenario.describe()}") from exc
        finally:
            self.probe.stop.set()
            self.probe.join(30)
            for reader in self.readers:
                reader.join(30)
            for lease in self.leases.values():
                lease.release()
            self.store.engine.dispose()
            if self.mirrors is not None:
                self.mirrors.remove()
        self.check()
        self.tally.runs += 1
        self.tally.group_starts += len(self.launched)
        encoding = self.scenario.table.encoding
        if encoding is not None:
            drawn = encoding.kind if encoding.kind == TOMBSTONE_KEYS else \
                f"{encoding.kind}, position: {encoding.position or 'by the connector'}" \
                + (", null tombstones" if encoding.tombstones else "")
            self.tally.encodings[drawn] = self.tally.encodings.get(drawn, 0) + 1
        return self.tally

    def fail(self, what: str) -> None:
        raise Violation(f"{what}\n{self.scenario.describe()}")

    # a writer's batch

    def records(self, step: Write) -> list[Record]:
        writer = self.scenario.writers[step.writer]
        return [record(self.scenario.seed, step.writer, writer.dead_letters, p, o, self.deletes(writer),
                       self.scenario.table.positioned, self.scenario.table.routed, self.encoding(writer))
                for p, start, end in step.ranges for o in range(start, end)]

    def evolved(self, step: Write) -> bool:
        evolve_from = self.scenario.writers[step.writer].evolve_from
        return evolve_from is not None and step.number >= evolve_from

    def write(self, step: Write) -> None:
        writer = self.scenario.writers[step.writer]
        records = self.records(step)
        evolved = self.evolved(step)
        if writer.job:
            self.plan_batch(step)
        fault, stop = step.fault, step.stop
        if fault or stop:
            self.tally.faults += 1
        refusal = writer.deletes_off and bool(self.model.tombs)  # a delete of the table is recorded
        for _ in range(3):  # the first try, the replay after a fault or a fix, once more after a second fault
            try:
                outcome = self.attempt(step, records, evolved, fault, stop=stop)
            except OptionError as exc:
                if not (writer.deletes_off and exc.option == "deletes" and self.model.tombs):
                    raise
                self.expect_nothing_committed(step)  # refused: a delete of the table is recorded
                return
            except SinkError as exc:
                if "refused the row at" not in str(exc):
                    raise
                self.refused(step, records, str(exc))
                fault = None
                continue
            if outcome == "done":
                if refusal:
                    self.fail(f"writer {step.writer}'s batch {step.number}, without deletes, committed into a "
                              "table with recorded deletes")
                return
            fault = stop = None
        self.fail(f"writer {step.writer}'s batch {step.number} did not commit in three tries")

    def plan_batch(self, step: Write) -> None:
        """What the source does at planning: the job held by this launch, its range recorded."""
        job, writer = self.job(step.writer), self.scenario.writers[step.writer]
        if step.writer not in self.leases:
            config = self.mirrors.config(writer.listener, self.topic(step.writer), self.group(step.writer)) \
                if writer.mirror and self.mirrors else None
            at_group = writer.group is not None and self.mirrors is not None  # through the source's own start
            with self.connector_side(step.writer) if at_group else nullcontext():
                self.store.ensure_job(job, "stream" if writer.path == STREAM else "backfill", config)
                self.leases[step.writer] = self.store.hold(job)
                if at_group:
                    self.launch_at_group(step.writer)
            if not at_group and writer.pins and not self.store.snapshot(job) and not self.store.first_start(job):
                # the source's first launch of a stream starting at latest or a time (or, without the stack's
                # Kafka, at a group's offsets): its start kept at once
                start = {TopicPartition(self.topic(step.writer), p): writer.first(p) for p in range(PARTITIONS)}
                if self.store.pin_start(job, start, self.leases[step.writer].generation):
                    self.model.committed[step.writer] = {p: writer.first(p) for p in range(PARTITIONS)}
        generation = self.leases[step.writer].generation
        ranges = [OffsetRange(self.topic(step.writer), p, s, e) for p, s, e in step.ranges]
        if writer.pins:  # Spark's start of the batch, checked against offsets_db's position (a fresh query's)
            self.store.record_planned(job, ranges, generation=generation,
                                      start={TopicPartition(self.topic(step.writer), p): s for p, s, _ in step.ranges})
        else:
            self.store.record_planned(job, ranges, generation=generation)

    # a stream started at a Kafka Connect sink's consumer group

    @contextmanager
    def connector_side(self, writer: int):
        """Around a launch of a stream started at a group. Before the first launch the connector ran and stopped:
        the topic holds its records and the group its committed offsets. With a live member, the launch is refused
        before it holds the job (stream_query's check) and by the source as it reads the group, nothing kept
        either time; then the member leaves. Before every later launch the group moves (the connector's offsets
        committed elsewhere), and with a member drawn the connector runs again meanwhile: a job with a position
        never reads the group, so neither moves nor refuses the launch."""
        group, topic, start = self.connector(writer), self.topic(writer), self.scenario.writers[writer].group
        if writer in self.launched:
            later = writer not in self.earliest
            if later:
                stands = self.model.committed.get(writer, {})
                self.mirrors.commit(group, topic, {p: 0 if stands.get(p, start.first(p)) else start.log_end[p]
                                                   for p in range(PARTITIONS)})
            with self.mirrors.member(group, topic) if later and start.member else nullcontext():
                if later:
                    self.check_start(writer)
                yield
            return
        self.mirrors.fill(topic, start.log_end)
        self.mirrors.commit(group, topic, {p: c for p, c in enumerate(start.committed) if c is not None})
        if start.member:
            with self.mirrors.member(group, topic):
                self.refused_for_member(writer)
        yield

    def check_start(self, writer: int) -> None:
        """stream_query's check of a launch at a group, before it holds the job."""
        from streamfill.connectors.kafka.offsets import GroupOffsets
        from streamfill.spark_jobs.stream_query import check_start

        check_start(LaunchArgs(self.job(writer), GroupOffsets(self.connector(writer))),
                    self.mirrors.client(self.scenario.writers[writer].group.listener), self.url)

    def refused_for_member(self, writer: int) -> None:
        """The first launch while the group has a live member: refused, naming the group, before anything is
        recorded; and, for a member that joined after that check, by the source as it reads the group."""
        group, job = self.connector(writer), self.job(writer)
        try:
            self.check_start(writer)
        except BrokerRefused as exc:
            if group not in str(exc):
                self.fail(f"writer {writer}'s launch was refused without naming the group {group}: {exc}")
        else:
            self.fail(f"writer {writer}'s launch at group {group} went on while the group had a live member")
        if self.query("SELECT 1 FROM jobs WHERE name = :j", j=job):
            self.fail(f"writer {writer}'s launch refused for the group's live member recorded its job")
        self.store.ensure_job(job, "stream")
        self.leases[writer] = self.store.hold(job)
        try:
            self.source_start(writer)
        except BrokerRefused as exc:
            if group not in str(exc):
                self.fail(f"writer {writer}'s source was refused without naming the group {group}: {exc}")
        else:
            self.fail(f"writer {writer}'s source read group {group} while it had a live member")
        finally:
            self.leases.pop(writer).release()  # the refused launch ends
        self.expect_nothing_kept(writer, "refused for the group's live member")

    def launch_at_group(self, writer: int) -> None:
        """The source's start (its initialOffset, as Spark asks a query without a checkpoint): the first launch
        reads the group and keeps the offsets in offsets_db; every later one starts where offsets_db says."""
        start, job = self.scenario.writers[writer].group, self.job(writer)
        first = writer not in self.launched
        try:
            begins = self.source_start(writer)
            if first and start.refused and writer not in self.earliest:
                self.fail(f"writer {writer}'s launch went on at group {self.connector(writer)}, which committed no "
                          f"offset of the topic, starting at {begins}")
        except OptionError as exc:
            if not (first and start.refused and exc.option == STARTING_GROUP.key and writer not in self.earliest):
                raise
            self.leases.pop(writer).release()  # refused: the user starts at earliest, as the refusal says
            self.expect_nothing_kept(writer, "refused for a group without committed offsets")
            self.earliest.add(writer)
            self.leases[writer] = self.store.hold(job)
            begins = self.source_start(writer)
        expected = {p: self.model.committed.get(writer, {}).get(p, start.first(p)) for p in range(PARTITIONS)}
        if begins != expected:
            self.fail(f"writer {writer}'s launch started at {begins}, not at {expected} (offsets_db's position, else "
                      f"its group's start)" + ("" if first else f"; its group {self.connector(writer)} moved"))
        self.launched.add(writer)
        if first and not start.refused:
            kept = {tp.partition: o for tp, o in self.store.snapshot(job).items()}
            if kept != expected:
                self.fail(f"writer {writer}'s first launch kept {kept} in offsets_db before any batch, not its "
                          f"group's start {expected}")
            self.model.committed[writer] = expected
            if start.killed:  # killed once its start is kept: the next launch starts there, the group moved
                self.leases.pop(writer).release()
                with self.connector_side(writer):
                    self.leases[writer] = self.store.hold(job)
                    self.launch_at_group(writer)

    def source_start(self, writer: int) -> dict[int, int]:
        """The source's initialOffset under the harness's hold on the job: where the launch starts, per partition."""
        from streamfill.connectors.kafka import source_declarations as source
        from streamfill.connectors.kafka.options import parse
        from streamfill.connectors.spark.source import KafkaStreamReader
        from streamfill.spark_jobs.kafka_read import kafka_options

        w, topic = self.scenario.writers[writer], self.topic(writer)
        options = {**kafka_options(self.mirrors.client(w.group.listener)), source.SUBSCRIBE.key: topic,
                   source.JOB.key: self.job(writer), source.OFFSETS_DB_URL.key: self.url,
                   source.JOB_GENERATION.key: str(self.leases[writer].generation)}
        if writer in self.earliest:
            options[source.STARTING_OFFSETS.key] = "earliest"
        else:
            options[STARTING_GROUP.key] = self.connector(writer)
        if w.mirror:
            options[source.COMMIT_TO_GROUP.key] = self.group(writer)
        reader = KafkaStreamReader(parse(options, streaming=True))
        try:
            with self.mirrors.environment(w.listener) if w.mirror else nullcontext():
                begins = reader.initialOffset()
        finally:
            reader.stop()
        return {int(p): o for p, o in begins.get(topic, {}).items()}

    def expect_nothing_kept(self, writer: int, why: str) -> None:
        """A refused launch kept no position and planned no batch."""
        job = self.job(writer)
        batches = self.query("SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j",
                             j=job)[0][0]
        if self.store.snapshot(job) or batches:
            self.fail(f"writer {writer}'s launch, {why}, kept a position {self.store.snapshot(job)} or {batches} "
                      "batches in offsets_db")

    def relaunch(self, step: Write) -> None:
        """The launch died (or lost its session in a crash): a new one takes the job and plans the batch again,
        as Spark replays a batch its checkpoint did not finish."""
        self.leases.pop(step.writer).release()
        self.plan_batch(step)

    def attempt(self, step: Write, records: list[Record], evolved: bool, fault: str | None,
                replay: bool = False, stop: str | None = None) -> str:
        plan = self.sink_plan(step, evolved)
        self.model.planned(evolved)
        by_partition = ([records] if self.scenario.writers[step.writer].packed
                        else [[r for r in records if r.partition == p] for p, _, _ in step.ranges])
        messages = []
        for n, part in enumerate(by_partition):
            if fault == LOST_WORKER and n == 0:
                postgres_staging.stage_write(plan, self.batches(step, part, evolved))  # its message is lost
            messages.append(postgres_staging.stage_write(plan, self.batches(step, part, evolved)))
            if fault == CRASH_BETWEEN_TASKS and n == 0:
                self.crash()
        if fault == KILLED_BEFORE_COMMIT:
            self.relaunch(step)
            return "again"
        if fault == DOWN_AT_COMMIT:
            return self.down_at_commit(step, plan, messages)
        grace = Grace(self.job(step.writer)) if stop else None
        if grace is not None and stop == STOP_PAST_GRACE:
            grace.run_out()
            if grace.cuts != 1 or grace.stop.ended():
                self.fail(f"writer {step.writer}'s stop grace ran out before its batch {step.number} committed, and "
                          f"the launch was cut {grace.cuts} times (once expected), the stop taken as in time")
            self.relaunch(step)  # the cut launch committed nothing; the next one reads the batch again
            return "again"
        try:
            with self.committing(step), self.neighbour(step):
                postgres_commit.commit(plan, messages, None)
        except SinkError as exc:
            postgres_commit.abort(plan, messages)
            if fault == CRASH_BETWEEN_TASKS and "found where the tasks staged" in str(exc):
                self.expect_nothing_committed(step)
                if self.scenario.writers[step.writer].job:
                    self.relaunch(step)
                return "again"
            raise
        except BaseException:
            postgres_commit.abort(plan, messages)
            raise
        if fault == CRASH_BETWEEN_TASKS:
            self.fail(f"writer {step.writer}'s batch {step.number} committed though PostgreSQL crashed after its "
                      "first task staged (the crash emptied what that task staged)")
        self.check_mirror(step)
        if replay:  # the batch committed before: its replay moved nothing, as the final check shows
            return "done"
        refused = self.model.write(step.writer, self.scenario.writers[step.writer], self.topic(step.writer),
                                   records, evolved)
        if refused and not self.scenario.writers[step.writer].dead_letters:
            self.fail(f"writer {step.writer}'s batch {step.number} committed though the table refuses "
                      f"{[(r.partition, r.offset) for r in refused][:5]} and dead letters are off")
        self.tally.batches += 1
        if grace is not None and not grace.ended_after_commit(stop == STOP_AT_GRACE_END):
            self.fail(f"writer {step.writer}'s batch {step.number} committed within its stop grace, and the launch "
                      f"was cut {grace.cuts} times, the stop taken as in time: {grace.in_time}")
        if grace is not None and grace.cuts:  # cut as it committed: Spark's commit log may miss the batch
            fault = KILLED_AFTER_COMMIT
        elif grace is not None:  # stopped between batches; the next batch is a new launch's
            self.leases.pop(step.writer).release()
        if fault == KILLED_AFTER_COMMIT:  # Spark's commit log missed it: the batch is replayed
            self.relaunch(step)
            self.attempt(step, records, evolved, None, replay=True)
        if fault == CRASH_AFTER_COMMIT:
            self.crash()
            if step.writer in self.leases:
                self.leases.pop(step.writer).release()
        return "done"

    def down_at_commit(self, step: Write, plan, messages) -> str:
        """PostgreSQL is down when the driver commits: the batch fails (an outage is retried, never taken for a
        bad record), Spark aborts it, and the restarted launch replays it once PostgreSQL is back."""
        self.postgres.stop()
        try:
            postgres_commit.commit(plan, messages, None)
        except (DBAPIError, psycopg2.OperationalError) as exc:
            if "refused" not in str(exc).lower() and "connect" not in str(exc).lower():
                self.fail(f"a commit with PostgreSQL down failed without saying it could not connect: {exc}")
        else:
            self.fail(f"writer {step.writer}'s batch {step.number} committed with PostgreSQL down")
        finally:
            postgres_commit.abort(plan, messages)  # cannot reach PostgreSQL: logs and leaves the stage
            self.postgres.start()
        self.expect_nothing_committed(step)
        if self.scenario.writers[step.writer].job:
            self.relaunch(step)
        return "again"

    @contextmanager
    def neighbour(self, step: Write):
        """While the batch commits, another deleting commit of the table holds its deletes for longer than one try
        of the lock (a neighbour's slow commit): the commit waits its turn, never fails."""
        if not step.neighbour:
            yield
            return
        holding, done = threading.Event(), threading.Event()

        def hold() -> None:
            with psycopg2.connect(dsn(self.url)) as conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                            (deleted_keys.DELETES_LOCK_SPACE, f"public.{self.table}"))
                holding.set()
                done.wait(HOLD_S)
        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        holding.wait(30)
        try:
            yield
        finally:
            done.set()
            holder.join(30)

    def committing(self, step: Write):
        """The committing process's environment: a SASL_SSL mirror takes its secrets from STREAMFILL_KAFKA_*."""
        writer = self.scenario.writers[step.writer]
        return self.mirrors.environment(writer.listener) if writer.mirror and self.mirrors else nullcontext()

    def check_mirror(self, step: Write) -> None:
        """commitToGroup: after every commit, the group's offsets are offsets_db's."""
        if not (self.scenario.writers[step.writer].mirror and self.mirrors):
            return
        stands = dict(self.query("SELECT partition, next_offset FROM latest_offsets WHERE job = :j",
                                 j=self.job(step.writer)))
        group = self.mirrors.offsets(self.group(step.writer), self.topic(step.writer))
        if group != stands:
            self.fail(f"writer {step.writer}'s consumer group stands at {group}, offsets_db at {stands}")

    def refused(self, step: Write, records: list[Record], message: str) -> None:
        """A row the table refuses with dead letters off: the batch failed naming the row, the constraint and
        the reason, and committed nothing. The user then drops the constraint and the batch is replayed."""
        writer = self.scenario.writers[step.writer]
        topic = self.topic(step.writer)
        refusable = {(topic, r.partition, r.offset) for r in self.model.attempted(topic, records)
                     if self.model.refused(r)}
        if writer.dead_letters or not refusable:
            self.fail(f"writer {step.writer}'s batch {step.number} failed on a refused row it should not have: "
                      f"{message}")
        if f"by constraint {CHECK}" not in message or not any(
                f"topic {t}, partition {p}, offset {o} " in message for t, p, o in refusable):
            self.fail(f"the failure does not name a refused row and the constraint: {message}")
        self.expect_nothing_committed(step)
        self.act(Action(CHECK_OFF, 0))
        if writer.job:
            self.relaunch(step)

    def expect_nothing_committed(self, step: Write) -> None:
        names = ", ".join(f'"{n}"' for n in self.model.columns())
        if self.model.exists and set(self.query(f'SELECT {names} FROM "{self.table}"')) != self.model.expected_rows():
            self.fail(f"writer {step.writer}'s failed batch {step.number} changed the table")
        if not self.scenario.writers[step.writer].job:
            return
        stands = dict(self.query("SELECT partition, next_offset FROM latest_offsets WHERE job = :j",
                                 j=self.job(step.writer)))
        if stands != self.model.committed.get(step.writer, {}):
            self.fail(f"writer {step.writer}'s failed batch {step.number} moved its offsets to {stands}")

    def sink_plan(self, step: Write, evolved: bool):
        writer = self.scenario.writers[step.writer]
        schema = self.schema(writer, evolved, self.wide(step))
        options = {"table": self.table, "url": self.url, "mode": self.scenario.table.mode,
                   "deadLetters": str(writer.dead_letters).lower(), "evolveSchema": str(evolved).lower()}
        if self.scenario.table.keyed:
            options["keyColumns"] = "k"
        if self.deletes(writer):
            options["deletes"] = "true"
        if self.scenario.table.positioned and self.scenario.table.version_column != SOURCE_POSITION:
            options["versionColumn"] = self.scenario.table.version_column
        if self.encoding(writer) is not None:  # as a launch writes its entry's rows (spark_jobs.entry_sink)
            from streamfill.spark_jobs.entry_sink import sink_options

            parsed = self.parsed(step)
            schema = parsed.schema
            options = sink_options(parsed.spec, self.job(step.writer), self.table, REPLACE, self.url)
            del options[declared.JOB.key]  # a job's own below; a df.write has none
        if self.scenario.table.routed:
            coordinates = ["topic", "partition", "offset", "kafka_timestamp"]
            options["routes"] = json.dumps({
                self.table: {"columns": [f.name for f in self.schema(writer, evolved, self.wide(step)).fields
                                         if not f.name.startswith("_")],
                             "key": ["k"] if self.scenario.table.keyed else [], "mode": self.scenario.table.mode},
                self.side: {"columns": [*coordinates, "k"]}})
        if writer.job:
            options.update(job=self.job(step.writer), jobGeneration=str(self.leases[step.writer].generation))
        if writer.path == BACKFILL:
            options["endingOffsets"] = json.dumps({self.topic(step.writer): {str(p): e for p, _, e in step.ranges}})
        return postgres_plan.plan_write(options, schema, False, streaming=writer.path == STREAM)

    def schema(self, writer: Writer, evolved: bool, wide: bool = False):
        table = self.scenario.table
        extra = ("bigint" if wide else "int") if table.widens else "string"
        return _spark_schema(writer.dead_letters, evolved, self.deletes(writer), table.version_column
                             if table.positioned else None, table.routed, extra, table.encoding is not None)

    def encoding(self, writer: Writer) -> Encoding | None:
        """How the writer's records travel through Kafka (None: staged as the table's rows): a parsed table's
        writer without deletes is a user's df.write of rows of its own."""
        return None if writer.deletes_off else self.scenario.table.encoding

    def parsed(self, step: Write) -> Parsed:
        """The batch's records as Kafka carries them, read by the production parse of the writer's entry. Every
        batch of the writer read with the same entry is parsed at once (a Spark job each would cost more than the
        rest of the run), then taken apart by its offsets."""
        if (step.writer, step.number) in self.parses:
            return self.parses[(step.writer, step.number)]
        from streamfill.spark_jobs.kafka_read import rows_of

        writer = self.scenario.writers[step.writer]
        same = [s for s in self.scenario.steps if isinstance(s, Write) and s.writer == step.writer
                and self.entry(s) == self.entry(step)]
        entry = self.entry(step)
        spec = kafka_forms.spec(entry, self.job(step.writer), self.topic(step.writer), self.table,
                                writer.dead_letters)
        records = [r for s in same for r in self.records(s)]
        pairs = [kafka_forms.encoded(entry, self.scenario.seed, step.writer, r) for r in records]
        kafka = pa.table({"key": pa.array([k for k, _ in pairs], pa.binary()),
                          "value": pa.array([v for _, v in pairs], pa.binary()),
                          "topic": pa.array([self.topic(step.writer)] * len(records), pa.string()),
                          "partition": pa.array([r.partition for r in records], pa.int32()),
                          "offset": pa.array([r.offset for r in records], pa.int64()),
                          "timestamp": pa.array([r.stamp for r in records], pa.timestamp("us", tz="UTC")),
                          "timestampType": pa.array([0] * len(records), pa.int32())})
        if self.spark is None:
            raise ValueError(f"seed {self.scenario.seed} reads its table through the parse: give Run a spark")
        rows = rows_of(spec, self.spark().createDataFrame(kafka))
        parsed = rows.toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
        for s in same:
            mine = [pc.and_(pc.equal(parsed["partition"], p), pc.and_(pc.greater_equal(parsed["offset"], start),
                                                                       pc.less(parsed["offset"], end)))
                    for p, start, end in s.ranges]
            self.parses[(s.writer, s.number)] = Parsed(spec, rows.schema, parsed.filter(functools.reduce(pc.or_, mine)))
        return self.parses[(step.writer, step.number)]

    def entry(self, step: Write) -> kafka_forms.Entry:
        """The entry the writer's batch is read with: its table's encoding, version column and `extra`."""
        writer, table = self.scenario.writers[step.writer], self.scenario.table
        extra = (("bigint" if self.wide(step) else "int") if table.widens else "string") if self.evolved(step) \
            else None
        return kafka_forms.Entry(self.encoding(writer), table.version_column if table.positioned
                                 and table.version_column != SOURCE_POSITION else None, extra)

    def batches(self, step: Write, part: list[Record], evolved: bool):
        """What one task stages: its partitions' rows of the parse, as Spark hands a writer task Arrow batches;
        or the rows of a writer without a parse."""
        if self.encoding(self.scenario.writers[step.writer]) is None:
            return iter([self.arrow(step, part, evolved)])
        rows = self.parsed(step).rows
        mine = rows.filter(pc.is_in(rows.column("partition"), pa.array(sorted({r.partition for r in part}),
                                                                        pa.int32())))
        return iter(mine.to_batches())

    def deletes(self, writer: Writer) -> bool:
        """The writer's records may delete (it writes with `deletes`)."""
        return self.scenario.table.deletes and not writer.deletes_off

    def wide(self, step: Write) -> bool:
        """A widening table's `extra` is written as bigint from the writer's second evolved batch."""
        evolve_from = self.scenario.writers[step.writer].evolve_from
        return evolve_from is not None and step.number > evolve_from

    def arrow(self, step: Write, records: list[Record], evolved: bool) -> pa.RecordBatch:
        writer = self.scenario.writers[step.writer]
        data = {"topic": [self.topic(step.writer)] * len(records),
                "partition": pa.array([r.partition for r in records], pa.int32()),
                "offset": pa.array([r.offset for r in records], pa.int64()),
                "kafka_timestamp": pa.array([r.stamp for r in records], pa.timestamp("us", tz="UTC")),
                **({self.scenario.table.version_column: _versions(self.scenario.table.version_column, records)}
                   if self.scenario.table.positioned else {}),
                "k": pa.array([r.key for r in records], pa.string()),
                "v": pa.array([r.value for r in records], pa.string())}
        if self.scenario.table.encoding is not None:
            data[SEMANTIC_COLUMNS[0]] = pa.array([r.amount for r in records], pa.decimal128(10, 2))
            data[SEMANTIC_COLUMNS[1]] = pa.array([r.at for r in records], pa.timestamp("us", tz="UTC"))
        if evolved:
            data["extra"] = pa.array([r.offset for r in records], pa.int64() if self.wide(step) else pa.int32()) \
                if self.scenario.table.widens else [f"e{r.offset}" for r in records]
        if writer.dead_letters:
            data["_error"] = pa.array(["not json" if r.poison else None for r in records], pa.string())
            data["_raw"] = pa.array([b"{" if r.poison else None for r in records], pa.binary())
        if self.deletes(writer):
            data[DELETE_COLUMN] = pa.array([r.tomb for r in records], pa.bool_())
        if self.scenario.table.routed:
            data[ROUTE_COLUMN] = pa.array([None if r.poison else self.side if r.side else self.table
                                           for r in records], pa.string())
        return pa.RecordBatch.from_pydict(data)

    # faults

    def crash(self) -> None:
        from tests.private_services import crash

        crash(self.postgres)
        self.postgres.start()

    # the users

    def act(self, action: Action) -> None:
        if not self.model.exists:
            return
        if action.kind not in (DELETE, UPDATE, READER):  # a user's DDL waits for the analysts, not behind them
            for reader in self.readers:
                reader.join(30)
        table = sql.Identifier(self.table)
        with psycopg2.connect(dsn(self.url)) as conn, conn.cursor() as cur:
            if action.kind == DELETE:
                partition, remainder = action.arg % 2, action.arg % 5
                cur.execute(sql.SQL('DELETE FROM {} WHERE partition = %s AND "offset" %% 5 = %s '
                                    'RETURNING topic, partition, "offset"').format(table), (partition, remainder))
                gone = set(map(tuple, cur.fetchall()))
                if gone != self.model.delete(partition, remainder):
                    self.fail(f"the user's DELETE removed {len(gone)} rows, not the model's")
            elif action.kind == UPDATE:
                cur.execute(sql.SQL('UPDATE {} SET v = upper(v) WHERE "offset" %% 3 = %s AND length(v) < 10')
                            .format(table), (action.arg % 3,))
                if cur.rowcount != self.model.update(action.arg % 3):
                    self.fail(f"the user's UPDATE changed {cur.rowcount} rows, not the model's")
            elif action.kind == CHECK_ON and not self.model.check_on:
                cur.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (length(v) < 10) NOT VALID")
                            .format(table, sql.Identifier(CHECK)))
                self.model.check_on = True
            elif action.kind == CHECK_OFF and self.model.check_on:
                cur.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(table, sql.Identifier(CHECK)))
                self.model.check_on = False
            elif action.kind == TRIGGER and not self.model.trigger_on:
                audit = sql.Identifier(f"{self.table}_audit")
                cur.execute(sql.SQL("CREATE TABLE {} (n bigint NOT NULL); INSERT INTO {} VALUES (0)").format(
                    audit, audit))
                cur.execute(sql.SQL("CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                                    "UPDATE {a} SET n = n + 1; RETURN NULL; END $$; CREATE TRIGGER counted AFTER "
                                    "INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()").format(
                    f=sql.Identifier(f"{self.table}_count"), a=audit, t=table))
                self.model.trigger_on = True
            elif action.kind == COLUMN_BY_HAND and not self.model.by_hand:
                cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN by_hand text DEFAULT 'h'").format(table))
                self.model.add_by_hand()
            elif action.kind == READER:
                self.readers.append(Reader(self.url, self.table))
                self.readers[-1].start()

    # the invariants

    def query(self, statement: str, **params) -> list[tuple]:
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(statement), params)]
        finally:
            engine.dispose()

    def prune(self) -> None:
        """`streamfill db prune --apply` of the scenario's jobs, every age a millisecond: what each job resumes
        from stays, the rest of its history and every dead letter go."""
        from streamfill.spark_jobs.maintenance import prune

        names = [self.job(i) for i, w in enumerate(self.scenario.writers) if w.job]
        known = sorted(n for (n,) in self.query("SELECT name FROM jobs WHERE name = ANY(:n)", n=names))
        if known:
            prune(self.url, AT_ONCE, apply=True, jobs=known, progress=lambda _: None)
        self.model.prune()

    def check(self) -> None:
        model = self.model
        if self.probe.refused:
            self.fail(f"a reader waited behind streamfill for over a second: {self.probe.refused[:2]}")
        if self.probe.errors:
            self.fail(f"the dashboard's query failed: {self.probe.errors[:2]}")
        if not model.exists:
            return
        names = ", ".join(f'"{n}"' for n in model.columns())
        have = self.query(f'SELECT {names} FROM "{self.table}"')
        if len(have) != len(set(have)):
            self.fail(f"{len(have) - len(set(have))} rows are in the table twice")
        expected = model.expected_rows()
        if set(have) != expected:
            extra, missing = set(have) - expected, expected - set(have)
            self.fail(f"the table differs from the contract: {len(extra)} rows unexpected (e.g. "
                      f"{sorted(extra, key=str)[:3]}), {len(missing)} missing (e.g. {sorted(missing, key=str)[:3]})")
        if self.scenario.table.routed:
            side = self.query(f'SELECT topic, partition, "offset", kafka_timestamp, k FROM "{self.side}"')
            if len(side) != len(set(side)) or set(side) != model.side:
                self.fail(f"the routed second table holds {len(side)} rows, {len(set(side) - model.side)} "
                          f"unexpected, {len(model.side - set(side))} missing")
        deleted = {key[0]: tuple(coordinates) for key, *coordinates in self.query(
            'SELECT key, topic, partition, "offset" FROM deleted_keys WHERE target = :t', t=f"public.{self.table}")}
        tombs = {key: version[1:4] for key, version in model.tombs.items()}  # the newest tombstone of each key
        if deleted != tombs:
            differ = sorted(k for k in {*deleted, *tombs} if deleted.get(k) != tombs.get(k))
            self.fail(f"offsets_db's deleted keys differ from the contract at {len(differ)} keys, e.g. "
                      + ", ".join(f"{k}: {deleted.get(k)} recorded, {tombs.get(k)} expected" for k in differ[:3]))
        for index, writer in enumerate(self.scenario.writers):
            if writer.job:
                self.check_job(index)
        if model.trigger_on:
            counted = self.query(f'SELECT n FROM "{self.table}_audit"')[0][0]
            if counted != model.inserts:
                self.fail(f"the user's insert trigger counted {counted} rows, the model {model.inserts}")

    def check_job(self, index: int) -> None:
        job, topic, model = self.job(index), self.topic(index), self.model
        dead = self.query('SELECT d.topic, d.partition, d."offset" FROM dead_letters d JOIN jobs j ON j.id = d.job_id '
                          "WHERE j.name = :j", j=job)
        expected = model.dead.get(index, set())  # since the last prune
        if len(dead) != len(set(dead)) or set(dead) != expected:
            self.fail(f"job {job}: {len(dead) - len(set(dead))} dead letters twice, {len(set(dead) - expected)} "
                      f"unexpected (e.g. {sorted(set(dead) - expected)[:3]}), {len(expected - set(dead))} missing "
                      f"(e.g. {sorted(expected - set(dead))[:3]})")
        stands = dict(self.query("SELECT partition, next_offset FROM latest_offsets WHERE job = :j", j=job))
        if stands != model.committed.get(index, {}):
            self.fail(f"job {job}: offsets stand at {stands}, the model at {model.committed.get(index)}")
        ranges = self.query("SELECT bo.partition, bo.start_offset, bo.end_offset FROM batch_offsets bo JOIN batches b "
                            "ON b.id = bo.batch_id JOIN jobs j ON j.id = b.job_id WHERE j.name = :j AND "
                            "b.committed_at IS NOT NULL ORDER BY bo.partition, bo.start_offset", j=job)
        writer = self.scenario.writers[index]  # where the stream started: offsets before it are not its
        reach: dict[int, int] = {}
        for partition, start, end in ranges:
            before = reach.get(partition, writer.first(partition))
            # a prune leaves the batches a job resumes from, with gaps between them: they may not overlap
            if start < before if model.pruned else start != before:
                self.fail(f"job {job}: partition {partition}'s committed batches leave a gap or overlap at {start}")
            reach[partition] = end
        numbers = [n for (n,) in self.query("SELECT b.commit_no FROM batches b JOIN jobs j ON j.id = b.job_id "
                                            "WHERE j.name = :j AND b.committed_at IS NOT NULL ORDER BY 1", j=job)]
        newest = max([n for (n,) in self.query("SELECT commits FROM jobs WHERE name = :j", j=job)], default=0)
        # a prune leaves the newest commit and the ones snapshots name: numbers once each, the newest among them
        if (numbers != sorted(set(numbers)) or numbers[-1:] != ([newest] if newest else [])) if model.pruned \
                else numbers != list(range(1, newest + 1)):
            self.fail(f"job {job}: commit numbers (announcements) {numbers} have a gap or a repeat (the newest "
                      f"is {newest})")
        if model.table.mode != REPLACE:  # every offset once: a row, a dead letter, or a row the user deleted
            rows = self.query(f'SELECT partition, count(*) FROM "{self.table}" WHERE topic = :t GROUP BY 1', t=topic)
            per = dict(rows)
            for t, p, *_ in model.side:
                if t == topic:
                    per[p] = per.get(p, 0) + 1
            for t, p, _ in model.dead.get(index, set()) | model.pruned_dead.get(index, set()) | {
                    d for d in model.deleted if d[0] == topic}:
                per[p] = per.get(p, 0) + 1
            if per != {p: n - writer.first(p) for p, n in stands.items() if n - writer.first(p)}:
                self.fail(f"job {job}: rows + dead letters + deleted per partition {per} != committed {stands} "
                          f"less the start {[writer.first(p) for p in range(PARTITIONS)]}")
        self.tally.offsets += sum(n - writer.first(p) for p, n in stands.items())


def _versions(column: str, records: list[Record]) -> pa.Array:
    kind = {SOURCE_POSITION: pa.decimal128(38, 0), "seq": pa.int64(), "seq_at": pa.timestamp("us", tz="UTC")}[column]
    return pa.array([version_value(column, r.position) for r in records], kind)


def _spark_schema(dead_letters: bool, evolved: bool, deletes: bool = False, version: str | None = None,
                  routed: bool = False, extra: str = "string", semantic: bool = False):
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("kafka_timestamp", TimestampType()),
              *([StructField(version, {SOURCE_POSITION: DecimalType(38, 0), "seq": LongType(),
                                       "seq_at": TimestampType()}[version])] if version else []),
              StructField("k", StringType()), StructField("v", StringType()),
              *([StructField(SEMANTIC_COLUMNS[0], DecimalType(10, 2)), StructField(SEMANTIC_COLUMNS[1], TimestampType())]
                if semantic else [])]
    if evolved:
        fields.append(StructField("extra", {"string": StringType(), "int": IntegerType(), "bigint": LongType()}[extra]))
    if dead_letters:
        fields += [StructField("_error", StringType()), StructField("_raw", BinaryType())]
    if deletes:
        fields.append(StructField(DELETE_COLUMN, BooleanType()))
    if routed:
        fields.append(StructField(ROUTE_COLUMN, StringType()))
    return StructType(fields)


@dataclass(frozen=True)
class Parsed:
    """A batch's parse: the entry it was read with, the rows' Spark schema (the sink plans with it) and the rows."""

    spec: object  # spark_jobs.pipelines.PipelineSpec
    schema: object  # pyspark.sql.types.StructType
    rows: pa.Table


class Probe(threading.Thread):
    """A dashboard's query on the table every 0.2 s with lock_timeout 1s: refused means a reader waited behind
    streamfill for longer than the contract allows. Reconnects after a crash of PostgreSQL."""

    def __init__(self, url: str, table: str) -> None:
        super().__init__(daemon=True)
        self.url, self.table = url, table
        self.stop, self.refused, self.errors = threading.Event(), [], []

    def run(self) -> None:
        conn = None
        while not self.stop.wait(0.2):
            try:
                if conn is None or conn.closed:
                    conn = psycopg2.connect(dsn(self.url), options="-c lock_timeout=1s")
                    conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 10) s").format(
                        sql.Identifier(self.table)))
            except psycopg2.errors.LockNotAvailable as exc:
                self.refused.append(str(exc).strip())
            except psycopg2.errors.UndefinedTable:
                pass
            except (psycopg2.OperationalError, psycopg2.InterfaceError):  # PostgreSQL crashed: connect again
                conn = None
            except psycopg2.Error as exc:  # anything else a reader should never see
                self.errors.append(str(exc).strip())
        if conn is not None and not conn.closed:
            conn.close()


HOLD_S = 1.5  # a neighbour's deleting commit holds the table's deletes this long (one try of a lock waits 1 s)


class Grace:
    """A stream's stop grace (spark_jobs.stream_stop.StopGrace) whose timer runs out when the checker says: the stop
    arrives while the batch is in flight; `cuts` counts the launch's kills."""

    def __init__(self, job: str) -> None:
        from streamfill.spark_jobs.stream_stop import StopGrace

        self.expired = threading.Event()
        self.cuts = 0
        self.in_time: bool | None = None
        self.stop = StopGrace(threading.Event(), 1.0, job, cut=self._cut, wait=self._wait)
        self.stop("stopped by the checker")

    def _wait(self, ended: threading.Event, seconds: float) -> bool:
        self.expired.wait(60)
        return ended.is_set()

    def _cut(self) -> None:
        self.cuts += 1

    def run_out(self) -> None:
        self.expired.set()
        self.stop.timer.join(60)

    def ended_after_commit(self, racing: bool) -> bool:
        """The query stopped once its batch committed, the grace then running out (or, `racing`, running out at the
        same moment): True when the stop was in time exactly when nothing was cut."""
        if racing:
            runs_out = threading.Thread(target=self.run_out, daemon=True)
            runs_out.start()
            self.in_time = self.stop.ended()
            runs_out.join(60)
        else:
            self.in_time = self.stop.ended()
            self.run_out()
        return self.in_time == (self.cuts == 0) and self.cuts <= 1


class Reader(threading.Thread):
    """An analyst's REPEATABLE READ transaction that holds the table for a second and a half."""

    def __init__(self, url: str, table: str, hold_s: float = 1.5) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.hold_s = url, table, hold_s

    def run(self) -> None:
        try:
            conn = psycopg2.connect(dsn(self.url))
        except psycopg2.OperationalError:
            return
        try:
            conn.set_session(isolation_level="REPEATABLE READ")
            with conn.cursor() as cur:
                cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(self.table)))
            threading.Event().wait(self.hold_s)
            conn.rollback()
        except psycopg2.Error:
            pass
        finally:
            conn.close()


@dataclass(frozen=True)
class LaunchArgs:
    """What stream_query.check_start reads of a stream launch's arguments."""

    job: str
    start_spec: object  # connectors.kafka.offsets.StreamStart


class Mirrors:
    """A run's side of the stack's Kafka: for commitToGroup, the writers' topics (a group commits offsets of
    topics that exist), their launch's check and stored client, and what a lag tool reads of their groups; for a
    stream started at a Kafka Connect sink's group, the records the connector read, its group's committed offsets
    and a member of the group while the connector runs."""

    def __init__(self, cluster: Settings, prefix: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.cluster, self.prefix = cluster, prefix
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # a lag tool, the super user
        self.topics: list[str] = []
        self.groups: list[str] = []

    def client(self, listener: str) -> dict[str, str]:
        return {PLAINTEXT: self.cluster.kafka_client, SASL_SSL: self.cluster.kafka_secured_client,
                OAUTH: self.cluster.kafka_oauth_client}[listener]()

    @contextmanager
    def environment(self, listener: str):
        from streamfill.kafka_client import settings_env

        names = [k for k in os.environ if k.startswith("STREAMFILL_KAFKA_")]
        before = {k: os.environ.pop(k) for k in names}
        os.environ.update(settings_env(self.client(listener)))
        try:
            yield
        finally:
            for k in [k for k in os.environ if k.startswith("STREAMFILL_KAFKA_")]:
                del os.environ[k]
            os.environ.update(before)

    def config(self, listener: str, topic: str, group: str) -> dict:
        """What the launch records for commitToGroup, once it checked that the mirror will work."""
        from streamfill.connectors.kafka import group_mirror

        self.topic(topic)
        self.groups.append(group)
        client = self.client(listener)
        with self.environment(listener):
            group_mirror.check(group, client)
        return {"commit_to_group": {"group": group, "kafka": group_mirror.kept(client)}}

    def topic(self, topic: str) -> None:
        from confluent_kafka.admin import NewTopic

        if topic not in self.topics:
            self.admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            self.topics.append(topic)

    def fill(self, topic: str, ends: tuple[int, ...]) -> None:
        """The topic made and holding `ends[p]` records in each partition p (offsets from 0)."""
        from confluent_kafka import Producer

        self.topic(topic)
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "linger.ms": 5})
        failed: list[str] = []
        for partition, end in enumerate(ends):
            for offset in range(end):
                producer.produce(topic, value=b"%d" % offset, partition=partition,
                                 on_delivery=lambda err, _msg: err and failed.append(str(err)))
        if producer.flush(60) or failed:
            raise AssertionError(f"the records of {topic} were not all written: {failed[:3]}")

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """The group's committed offsets (a stopped connector's, or moved by another consumer): kept for removal."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KafkaPartition

        if group not in self.groups:
            self.groups.append(group)
        if offsets:
            request = ConsumerGroupTopicPartitions(group, [KafkaPartition(topic, p, o) for p, o in offsets.items()])
            self.admin.alter_consumer_group_offsets([request])[group].result(30)
        if {p: o for p, o in self.offsets(group, topic).items() if p in offsets} != offsets:
            raise AssertionError(f"group {group} does not stand at {offsets}: {self.offsets(group, topic)}")

    @contextmanager
    def member(self, group: str, topic: str):
        """A live member of the group (a running connector's task) that commits nothing; gone when it leaves."""
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise AssertionError(f"the member of {group} got no partition of {topic} in 60 s")
            consumer.poll(0.2)
        try:
            yield
        finally:
            consumer.close()
            while self.admin.describe_consumer_groups([group])[group].result(30).members:
                if time.monotonic() > deadline + 60:
                    raise AssertionError(f"the member of {group} did not leave")
                time.sleep(0.2)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        result = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.offset >= 0}

    def remove(self) -> None:
        for group, future in (self.admin.delete_consumer_groups(self.groups).items() if self.groups else []):
            try:
                future.result(30)
            except Exception:  # noqa: BLE001 - a group never committed to does not exist
                pass
        for topic, future in (self.admin.delete_topics(self.topics).items() if self.topics else []):
            future.result(60)

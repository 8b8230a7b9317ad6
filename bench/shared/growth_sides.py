"""The micro-batch of bench/growth.py: a stream launch's offsets_db work, batch after batch, on the database with
history and on the empty one."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import pyarrow as pa
from sqlalchemy import text
from ui_queries import JOB

from shared.growth_history import PER, SINK_TABLE, TOPICS
from streamfill.partitions import TopicPartition


@dataclass
class Side:
    """One database's stream launch at one level: its lease, run, the source's tracker and the sink's plan."""

    url: str
    next_offset: int = 0  # where each topic's next batch starts (all 4 topics move together)
    times: dict[str, list[float]] = field(default_factory=lambda: {"plan": [], "commit": [], "hook": []})

    def launch(self, stack: ExitStack) -> None:
        """What a stream launch does before its first batch: hold the job, record its run, plan the sink."""
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

        from streamfill.connectors.spark.job_offsets import JobTracker
        from streamfill.connectors.spark.postgres_plan import plan_write
        from streamfill.offsets_db.engine import shared_engine
        from streamfill.offsets_db.store import OffsetStore

        store = OffsetStore(shared_engine(self.url))
        lease = stack.enter_context(store.hold(JOB))
        self.run_id = store.start_run(JOB, dag_id=f"streamfill_stream__{JOB}", lease=lease)
        stack.callback(store.end_run, self.run_id, "succeeded")
        self.tracker = JobTracker(JOB, self.url, "stream", {"subscription": repr(TOPICS), "commit_to_group": None},
                                  generation=lease.generation)
        rows = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                           StructField("offset", LongType()), StructField("value", BinaryType()),
                           StructField("_error", StringType()), StructField("_raw", BinaryType())])
        self.plan = plan_write({"table": SINK_TABLE, "job": JOB, "jobGeneration": str(lease.generation),
                           "deadLetters": "true", "url": self.url}, rows, False, streaming=True)
        snapshot = self.tracker.resume()
        self.next_offset = snapshot[TopicPartition(TOPICS[0], 0)]
        with store.engine.begin() as conn:  # the same table for every level: a commit into the same rows
            conn.execute(text(f'TRUNCATE "{SINK_TABLE}"'))

    def batch(self, counted: bool) -> None:
        """One micro-batch: plan, stage (not timed), commit, the source's commit hook."""
        from streamfill.connectors.kafka.enumerator import Plan
        from streamfill.connectors.spark.postgres_commit import commit
        from streamfill.connectors.spark.postgres_staging import stage_write

        begin = self.next_offset
        start = {TopicPartition(t, 0): begin for t in TOPICS}
        ends = {tp: begin + PER for tp in start}
        # the broker's watermarks as the enumerator reports them: 800 offsets behind the log end after this batch
        plan = Plan([], {tp: (0, end + 800) for tp, end in ends.items()}, [],
                    {tp: (begin, end) for tp, end in ends.items()})
        t0 = time.perf_counter()
        self.tracker.record(plan, start=start, from_checkpoint=True)
        t1 = time.perf_counter()
        messages = [stage_write(self.plan, iter([staged_rows(t, begin, dead=i == 0)])) for i, t in enumerate(TOPICS)]
        t2 = time.perf_counter()
        commit(self.plan, messages, begin // PER)  # Spark's batch id: the batch's seq - 1, as in the history
        t3 = time.perf_counter()
        self.tracker.committed_by_spark(ends)
        t4 = time.perf_counter()
        self.next_offset = begin + PER
        if counted:
            for what, ms in (("plan", t1 - t0), ("commit", t3 - t2), ("hook", t4 - t3)):
                self.times[what].append(ms * 1000)


VALUES = pa.array([b'{"order": %d, "amount": 12.5, "currency": "EUR"}' % i for i in range(PER)], pa.binary())


def staged_rows(topic: str, first: int, dead: bool) -> pa.RecordBatch:
    """A task's rows of one topic's range [first, first + PER); with `dead`, its last row is a dead letter."""
    error = [None] * PER
    raw: list[bytes | None] = [None] * PER
    if dead:
        error[-1], raw[-1] = "amount below min 0: -1", b'{"amount": -1}'
    return pa.record_batch({"topic": pa.array([topic] * PER), "partition": pa.array([0] * PER, pa.int32()),
                            "offset": pa.array(range(first, first + PER), pa.int64()), "value": VALUES,
                            "_error": pa.array(error, pa.string()), "_raw": pa.array(raw, pa.binary())})


def measure_commits(main: Side, control: Side, warmup: int, repeat: int) -> None:
    """Batches of both sides, alternated: whatever the machine does meanwhile hits both alike."""
    with ExitStack() as stack:
        main.launch(stack)
        control.launch(stack)
        for i in range(warmup + repeat):
            for side in ((main, control) if i % 2 else (control, main)):
                side.batch(counted=i >= warmup)


def reset_control(url: str) -> None:
    """The empty side: its stream job forgotten and made again, with no batch, pinned at offset 0."""
    from streamfill.offsets_db.engine import shared_engine
    from streamfill.offsets_db.store import OffsetStore

    store = OffsetStore(shared_engine(url))
    store.forget_jobs([JOB])
    store.ensure_job(JOB, "stream", {"subscription": repr(TOPICS), "commit_to_group": None})
    store.pin_start(JOB, {TopicPartition(t, 0): 0 for t in TOPICS})

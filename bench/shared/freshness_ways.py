"""The two ways bench/freshness.py (and bench/batch_cycle.py) run while a paced producer sends: `streamfill
stream` and the hand-written alternative, each on a fresh topic, measured until every offset landed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from cleanup import Leftovers
from sqlalchemy import text

from shared.freshness_run import Batches, Machine, Run, Watcher
from shared.jdbc_way import jdbc_target, jdbc_writer
from streamfill.spark_jobs import stream
from streamfill.spark_jobs.demo.produce import ensure_topic
from streamfill.spark_jobs.pipelines import entry
from streamfill.spark_jobs.pipelines.compile import parse
from streamfill.trigger_grammar import parse_trigger

BENCH = Path(__file__).resolve().parent.parent


def paced(topic: str, rate: int, seconds: float, partitions: int) -> tuple[dict, float]:
    """bench/paced_producer.py in a process of its own; what it printed and when (wall clock) it started."""
    proc = subprocess.Popen([sys.executable, str(BENCH / "paced_producer.py"), "--topic", topic, "--rate", str(rate),
                             "--seconds", str(seconds), "--partitions", str(partitions)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the producer failed: {err.strip()[-2000:]}")
    sent = json.loads(out.strip().splitlines()[-1])
    return sent, sent["seconds"]


def caught_up(engine, table: str, dead: str | None, job: str | None, total: int, poll=lambda: None,
              timeout: float = 600) -> None:
    """Until every produced offset is in the table or its dead letters."""
    deadline = time.monotonic() + timeout
    while True:
        poll()
        with engine.connect() as conn:
            rows = conn.scalar(text(f'SELECT count(*) FROM "{table}"'))
            if job is not None:
                letters = conn.scalar(text("SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                           "WHERE j.name = :j"), {"j": job})
            elif conn.scalar(text("SELECT to_regclass(:t)"), {"t": f'"{dead}"'}) is not None:
                letters = conn.scalar(text(f'SELECT count(*) FROM "{dead}"'))
            else:  # its first batch has written valid rows, not yet its dead letters
                letters = 0
        if rows + letters >= total:
            return
        assert time.monotonic() < deadline, f"{table}: {rows + letters:,} of {total:,} offsets after {timeout} s"
        time.sleep(0.5)


def freshness(engine, table: str, topic: str, watcher: Watcher) -> list[tuple[float, float]]:
    with engine.connect() as conn:
        sample = conn.execute(text(f'SELECT partition, "offset", extract(epoch FROM kafka_timestamp) FROM "{table}" '
                                   'WHERE topic = :t AND "offset" % 100 = 0'), {"t": topic}).all()
    out = []
    for partition, offset, stamp in sample:
        seen = watcher.visible_at(partition, offset)
        if seen is not None:
            out.append((float(stamp), seen - float(stamp)))
    return out


def measured_run(engine, name: str, partitions: int, rate: int, seconds: float, settle: float, url: str,
                 batches: Batches, wait) -> Run:
    """Produce into `name` while the way runs; `wait(total)` returns once every offset landed."""
    watcher = Watcher(url, name, name, partitions)
    watcher.start()
    with Machine() as machine:
        began = time.time()
        sent, _ = paced(name, rate, seconds, partitions)
        wait(sent["sent"])
    watcher.stop.set()
    watcher.join(5)
    return Run(freshness(engine, name, name, watcher), sent, batches, machine, began, settle)


def streamfill_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                   trigger: str, rate: int, seconds: float, settle: float = 0) -> Run:
    """(a): `streamfill stream` on a fresh topic, while the producer sends."""
    name = made.table(f"bench_fresh_sf_{uuid.uuid4().hex[:8]}")
    ensure_topic(bootstrap, made.topic(name), partitions)
    stop = threading.Event()
    job = made.job(name.replace("_", "-"))
    batches = Batches()
    runner = threading.Thread(target=stream.run, daemon=True, args=(
        stream.StreamArgs(job, name, name, work / name, trigger, pipeline="orders"), spark,
        {"bootstrap.servers": bootstrap}, url, stop, batches.add))
    runner.start()
    while not spark.streams.active:
        time.sleep(0.2)
    try:
        return measured_run(engine, name, partitions, rate, seconds, settle, url, batches,
                            lambda total: caught_up(engine, name, None, job, total))
    finally:
        stop.set()
        runner.join(120)


def alternative_way(spark, bootstrap: str, url: str, engine, work: Path, made: Leftovers, partitions: int,
                    trigger: str, rate: int, seconds: float, settle: float = 0) -> Run:
    """(b): format("kafka"), the same parse, foreachBatch JDBC, into a table made beforehand with an index on
    (topic, partition, offset), while the producer sends."""
    from streamfill.connectors.spark.pg_types import pg_type

    name = f"bench_fresh_jdbc_{uuid.uuid4().hex[:8]}"
    made.table(name, f"{name}_dead")
    ensure_topic(bootstrap, made.topic(name), partitions)
    jdbc, props = jdbc_target(url)
    kafka = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", name).option("startingOffsets", "earliest").load())
    parsed = parse(kafka, entry("orders"))
    fields = [f for f in parsed.schema.fields if f.name not in ("_error", "_raw")]
    with engine.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{name}" (' + ", ".join(f'"{f.name}" {pg_type(f.name, f.dataType)}'
                                                                 for f in fields) + ")"))
        conn.execute(text(f'CREATE INDEX ON "{name}" (topic, partition, "offset")'))
    query = (parsed.writeStream.foreachBatch(jdbc_writer(jdbc, name, props))
             .option("checkpointLocation", str(work / name))
             .trigger(**parse_trigger(trigger)).start())
    batches = Batches()

    def poll() -> None:
        for event in query.recentProgress:
            batches.add(event)

    try:
        return measured_run(engine, name, partitions, rate, seconds, settle, url, batches,
                            lambda total: caught_up(engine, name, f"{name}_dead", None, total, poll))
    finally:
        poll()
        query.stop()


WAYS = {"a": ("streamfill stream (exactly-once)", streamfill_way),
        "b": ("Spark kafka + foreachBatch JDBC (at-least-once)", alternative_way)}

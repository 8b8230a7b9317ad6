"""A producer that holds a steady rate on a busy machine, for bench/freshness.py.

The demo's events (1% bad) are made before the clock starts (a pool of at most --pool events, sent round and
round), so the send loop only hands bytes to librdkafka: making JSON in Python at 50,000 events/s would need
most of a core, which the ways under test need too. Records go out in steps of 5 ms, as many as are due; each
record's Kafka timestamp is the time it was handed over. linger.ms is 5, the latency a producer would choose.
Prints one JSON line: records sent, seconds, the rate kept, the CPU seconds this process used.

    .venv/bin/python bench/paced_producer.py --topic T --rate 20000 --seconds 120 [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from confluent_kafka import Producer

from streamfill.settings import get_settings
from streamfill.spark_jobs.demo.events import records
from streamfill.spark_jobs.demo.produce import ensure_topic

STEP_S = 0.005
LATENCY = {"linger.ms": "5", "compression.type": "lz4", "enable.idempotence": "true", "log_level": "3"}


def send(bootstrap: str, topic: str, rate: int, seconds: float, pool_size: int) -> dict:
    pool = [(key, value) for key, value, _ in records(min(pool_size, int(rate * seconds)), 0.01, seed=7)]
    producer = Producer({**LATENCY, "bootstrap.servers": bootstrap})
    total, sent = int(rate * seconds), 0
    cpu, started = os.times(), time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while sent < due:
            key, value = pool[sent % len(pool)]
            try:
                producer.produce(topic, value, key)
                sent += 1
            except BufferError:  # librdkafka's queue is full: let deliveries drain
                producer.poll(0.001)
        producer.poll(0)
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(min(ahead, STEP_S))
    elapsed = time.monotonic() - started
    left = producer.flush(60)
    used = os.times()
    return {"sent": sent - left, "seconds": round(elapsed, 3), "rate": round(sent / elapsed),
            "cpu_s": round(used.user + used.system - cpu.user - cpu.system, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=int, required=True, help="events per second")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--pool", type=int, default=500_000, help="distinct events made before the clock starts")
    args = ap.parse_args()
    bootstrap = get_settings().bootstrap_servers
    ensure_topic(bootstrap, args.topic, args.partitions)
    print(json.dumps(send(bootstrap, args.topic, args.rate, args.seconds, args.pool)), flush=True)


if __name__ == "__main__":
    main()

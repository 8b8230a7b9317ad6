"""Way (a) of bench/read_throughput.py: a bare confluent-kafka consumer reading a whole topic in one process.

It runs as a process of its own with nothing but confluent-kafka imported, as a user's script would: inside the
benchmark's Spark driver, whose heap holds about 100,000 objects, the garbage collector's passes over it made the
same loop take twice as long. Prints one JSON line: messages, bytes of values, and the seconds of the read alone
(not the interpreter's start).

    .venv/bin/python bench/bare_consumer.py --bootstrap localhost:9092 --topic T --partitions 4 [--config JSON]
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer, TopicPartition


def read_all(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **config})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = size = 0
    remaining = set(p for p, e in ends.items() if e > 0)
    while remaining:
        for m in c.consume(10_000, timeout=1.0):
            if m.error():
                continue
            count += 1
            size += len(m.value())
            if m.offset() + 1 >= ends[m.partition()]:
                remaining.discard(m.partition())
    c.close()
    return count, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--config", default="{}", help="librdkafka settings as a JSON object")
    args = ap.parse_args()
    started = time.perf_counter()
    count, size = read_all(args.bootstrap, args.topic, args.partitions, json.loads(args.config))
    print(json.dumps({"messages": count, "bytes": size, "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    main()

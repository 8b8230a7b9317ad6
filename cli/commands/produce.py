"""`streamfill produce`: the demo's order events into Kafka, some of them bad."""

from __future__ import annotations

from typing import Annotated

import typer

from streamfill.console import console, err, refusals
from streamfill.settings import get_settings


def produce(
    topic: Annotated[str, typer.Option("--topic", help="created when missing")],
    count: Annotated[int, typer.Option("--count", help="events to send")],
    rate: Annotated[float | None, typer.Option("--rate", help="events per second; full speed when left out")] = None,
    partitions: Annotated[int | None, typer.Option("--partitions", help="partitions of a new topic (1)")] = None,
    bad_ratio: Annotated[float, typer.Option("--bad-ratio", help="share of bad records, 0..1")] = 0.0,
    key_field: Annotated[str, typer.Option(
        "--key-field", help="event field used as the Kafka key, or none")] = "user_id",
    seed: Annotated[int, typer.Option("--seed", help="the same seed sends the same events")] = 7,
) -> None:
    """Send demo order events to Kafka; bad ones are invalid JSON, miss fields, have wrong types or ranges."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from streamfill.spark_jobs.demo import produce as demo

    key = None if key_field.lower() == "none" else key_field
    kafka = get_settings().kafka_client()
    with refusals():
        demo.check_args(count, rate, partitions, bad_ratio, key)
        have = demo.ensure_topic(kafka, topic, partitions)
        with Progress(TextColumn("sending to {task.fields[topic]}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), console=err, transient=True) as bar:
            task = bar.add_task("produce", total=count, topic=topic)
            done = demo.produce(kafka, topic, count, rate=rate, bad_ratio=bad_ratio, key_field=key,
                                seed=seed, on_progress=lambda n: bar.advance(task, n))
    console.print(f"{done.total:,} events to {topic} ({have} partitions): {done.valid:,} valid, {done.bad:,} bad, "
                  f"{done.seconds:.1f} s ({done.total / max(done.seconds, 1e-9):,.0f} events/s)")

"""A stream's arguments, checked when made; what a flag leaves out comes from the jobs file's entry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamfill.connectors.kafka.offsets import StreamStart, parse_start, start_option
from streamfill.connectors.kafka.source_declarations import SUBSCRIBE
from streamfill.durations import stop_grace_seconds
from streamfill.errors import OptionError
from streamfill.names import parse_table, validate_job_name
from streamfill.settings import get_settings
from streamfill.spark_jobs.launch_args import NamesAnEntry, entry_of, wait_seconds
from streamfill.trigger_grammar import parse_trigger


@dataclass(frozen=True)
class StreamArgs(NamesAnEntry):
    """A stream's arguments, checked when made (before anything is read or recorded)."""

    job: str
    topic: str | None  # None: the entry's topic, topics or topic_pattern
    table: str
    checkpoint: Path | str  # a local directory, or any Hadoop file system URL Spark reaches (hdfs://, s3a://)
    trigger: str = "5s"
    max_offsets_per_trigger: int | None = None
    start: str | None = None  # while offsets_db has no position for the job; None: the entry's `start`
    pipeline: str | None = None  # the jobs file's entry that parses the topic; None: the entry named like the job
    wait_for_job: str = "0"  # how long to wait for another launch holding the job; 0 refuses at once
    stop_grace: str | None = None  # how long a stop may take to commit the batch in flight; None: the entry's

    DERIVED = ("checkpoint", "topic", "table")  # from the job and its entry when not given

    def __post_init__(self) -> None:
        validate_job_name(self.job, "--job")
        parse_table(self.table, "--table")
        parse_trigger(self.trigger)
        wait_seconds(self.wait_for_job)
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise OptionError("--max-offsets-per-trigger", self.max_offsets_per_trigger, "must be at least 1",
                              "give the most offsets one micro-batch may read, e.g. 100000")
        self.require_entry()
        if self.start is not None:
            parse_start(self.start, "--start")
        if self.stop_grace is not None:
            stop_grace_seconds(self.stop_grace)

    @property
    def grace_s(self) -> float:
        """--stop-grace, else the entry's stop_grace: how long a stop waits for the batch in flight to commit."""
        return stop_grace_seconds(self.stop_grace or self.entry.stop_grace,
                                  "--stop-grace" if self.stop_grace else "stop_grace")

    @property
    def start_spec(self) -> StreamStart:
        """Where the stream starts: --start, else the entry's `start` (earliest by default). offsets_db's position
        for the job, once it has one, wins over either."""
        return parse_start(self.start or self.entry.start, "--start" if self.start else "start")

    @property
    def start_option(self) -> tuple[str, str]:
        """The source option of where the stream starts (start_spec)."""
        return start_option(self.start_spec)

    @property
    def subscription(self) -> tuple[str, str]:
        """The source's subscription option: --topic, else the entry's (entry.topics_option)."""
        return (SUBSCRIBE.key, self.topic) if self.topic else self.spec.topics_option

    @classmethod
    def from_flags(cls, *, job: str, topic: str | None = None, table: str | None = None,
                   checkpoint: str | Path | None = None, trigger: str | None = None,
                   max_offsets_per_trigger: int | None = None, pipeline: str | None = None, **flags) -> StreamArgs:
        """What a flag leaves out comes from the entry (the one named by --pipeline, else by --job): topic, table,
        trigger, max offsets per trigger. `checkpoint` defaults to the entry's checkpoint_dir/JOB, else
        STREAMFILL_HOME/checkpoints/JOB."""
        validate_job_name(job, "--job")
        spec = entry_of(job, pipeline)
        return cls(job=job, topic=topic, table=table or spec.table,
                   checkpoint=_location(checkpoint or _under(spec.checkpoint_dir, job)
                                        or get_settings().home / "checkpoints" / job),
                   trigger=trigger or spec.trigger,
                   max_offsets_per_trigger=(spec.max_offsets_per_trigger if max_offsets_per_trigger is None
                                            else max_offsets_per_trigger),
                   pipeline=pipeline, **flags)


def _under(folder: str | None, job: str) -> str | None:
    return None if folder is None else f"{folder.rstrip('/')}/{job}"


def _location(raw: str | Path) -> Path | str:
    """A checkpoint given as a URL (shared storage: hdfs://, s3a://, abfss://) stays one; anything else is a path."""
    return raw if isinstance(raw, str) and "://" in raw else Path(raw)

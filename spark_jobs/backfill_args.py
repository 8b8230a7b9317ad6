"""A backfill's arguments, checked when made, and the offsets_db job a backfill of an entry runs under."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from streamfill.connectors.postgres.sink_options import APPEND_NEW, MODES
from streamfill.errors import OptionError
from streamfill.names import default_table, parse_table, validate_job_name
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK
from streamfill.spark_jobs.launch_args import NamesAnEntry, entry_of, wait_seconds


@dataclass(frozen=True)
class BackfillArgs(NamesAnEntry):
    """A backfill's arguments, checked when made (before anything is read or recorded)."""

    job: str
    topic: str
    from_: str
    to: str
    table: str
    mode: str = APPEND_NEW
    chunk_size: int = DEFAULT_CHUNK
    pipeline: str | None = None  # the jobs file's entry that parses the topic; None: the entry named like the job
    wait_for_job: str = "0"  # how long to wait for another launch holding the job; 0 refuses at once

    DERIVED = ("table", "topic")  # from the job and its entry when not given

    def __post_init__(self) -> None:
        validate_job_name(self.job, "--job")
        if not self.topic:
            raise OptionError("--topic", self.topic, "is needed: a backfill reads one topic", "give --topic NAME")
        parse_table(self.table, "--table")
        if self.chunk_size < 1:
            raise OptionError("--chunk-size", self.chunk_size, "must be at least 1", "give offsets per chunk, "
                              f"e.g. {DEFAULT_CHUNK}")
        if self.mode not in MODES:
            raise OptionError("--mode", self.mode, "is not a mode",
                              "use append-new (keep existing rows) or replace (upsert)")
        wait_seconds(self.wait_for_job)
        self.require_entry()

    @classmethod
    def from_flags(cls, *, job: str, topic: str | None = None, from_: str, to: str, table: str | None = None,
                   mode: str | None = None, pipeline: str | None = None, **flags) -> BackfillArgs:
        """With --job naming an entry and no --topic, the entry's topic, table and mode, under a job of its own
        (`NAME.backfill.<hash of from, to, table>`: a stream's name is its stream's). Otherwise --topic and
        --pipeline (the entry whose columns parse the topic) are needed; the table defaults to the job name
        with - and . turned into _."""
        validate_job_name(job, "--job")
        if topic is None:
            spec = entry_of(job, pipeline)
            if spec.topic is None:
                raise OptionError("--topic", None, f"is needed: entry {spec.name!r} reads several topics "
                                  f"({spec.topics_option[1]}) and a backfill reads one",
                                  "give --topic with one of them")
            table = table or spec.table
            name = job if pipeline else backfill_job(spec.name, from_, to, table)
            return cls(job=name, topic=spec.topic, from_=from_, to=to, table=table, mode=mode or spec.mode,
                       pipeline=spec.name, **flags)
        return cls(job=job, topic=topic, from_=from_, to=to, table=table or default_table(job),
                   mode=mode or APPEND_NEW, pipeline=pipeline, **flags)

    def recorded(self) -> dict[str, str]:
        """What makes two launches the same backfill (the mode may change between passes)."""
        return {"topic": self.topic, "from": self.from_, "to": self.to, "table": self.table}


def backfill_job(entry: str, from_: str, to: str, table: str, kind: str = "backfill") -> str:
    """The offsets_db job of a backfill of an entry: the same range into the same table is the same job (a
    re-run continues or changes nothing), another range is another job."""
    digest = hashlib.sha1(f"{from_}|{to}|{table}".encode()).hexdigest()[:10]
    return f"{entry}.{kind}.{digest}"

"""The one error family of streamfill: every error a user sees says what was wrong, which value, and what to do.

`OptionError` is for every user input (data source and sink options, CLI flags, jobs-file fields, Params); the
others name a failure of something streamfill talks to (the broker, the data it reads, the exactly-once
protocol, the local stack, Airflow).
"""

from __future__ import annotations

# What a failure is, for whoever decides what to do next (a script reading the exit code, an Airflow task's
# retries; streamfill.console.EXIT_CODES): BAD_INPUT is a flag, a setting, an option or the jobs file that cannot
# be used; a REFUSAL repeats however often it is tried (a launch refused: fenced, a checkpoint or a revision that
# disagrees, a grant missing, data lost); HELD is a job another launch holds, free once that launch ends; an
# OUTAGE is something streamfill talks to out of reach, which a later try may find back; FAILED is a check that
# ran and found what it checks wrong (a quality suite).
BAD_INPUT, REFUSAL, HELD, OUTAGE, FAILED = "bad input", "refusal", "held", "outage", "failed"


class StreamfillError(Exception):
    """Base of every error streamfill raises on purpose; `kind` is one of the kinds above, or None (a failure a
    retry may or may not overcome: a stream that failed, a step of the protocol refused mid-batch)."""

    kind: str | None = None


class OptionError(StreamfillError, ValueError):
    """A user input is invalid; raised before anything is read or recorded.

    `option` is what the user wrote: a data source option (`startingOffsets`), a flag (`--from`), a field or a
    setting (`STREAMFILL_PG_PORT`).
    """

    kind = BAD_INPUT

    def __init__(self, option: str, value: object, problem: str, fix: str) -> None:
        self.option, self.value, self.problem, self.fix = option, value, problem, fix
        if option.startswith("--"):
            text = f"{option} {value!r} {problem}; {fix}"
        elif option.startswith("STREAMFILL_"):
            text = f"setting {option}={value!r}: {problem}. {fix}"
        else:
            text = f"option {option}={value!r}: {problem}. {fix}"
        super().__init__(text)


class BrokerError(StreamfillError):
    """The broker could not be reached or answered with an error."""

    kind = OUTAGE


class BrokerRefused(BrokerError):
    """The cluster refused this client: its credentials, its trust or an ACL; trying again cannot help."""

    kind = REFUSAL


class RegistryError(StreamfillError):
    """The schema registry could not be reached or failed: not a bad record, so the batch fails and is read again."""

    kind = OUTAGE


class DataLossError(StreamfillError):
    """Offsets that were planned or requested are gone from the broker and failOnDataLoss is true.

    `events` are the losses found, so the caller can record them before it fails."""

    kind = REFUSAL  # the offsets are gone for good: a person decides what to do

    def __init__(self, message: str, events: tuple = ()) -> None:
        super().__init__(message)
        self.events = tuple(events)


class SinkError(StreamfillError, ValueError):
    """A sink's target table does not fit what is written; raised on the driver before any row moves."""

    kind = REFUSAL


class ProtocolError(StreamfillError):
    """The exactly-once protocol refused a step: the recorded state and the request disagree."""


class CheckpointMismatch(ProtocolError):
    """Spark's checkpoint and offsets_db disagree on where a job stands; neither is silently trusted."""

    kind = REFUSAL

    def __init__(self, job: str, checkpoint: dict[tuple[str, int], int], snapshot: dict[tuple[str, int], int]) -> None:
        self.job, self.checkpoint, self.snapshot = job, checkpoint, snapshot
        differ = sorted(tp for tp in checkpoint.keys() & snapshot.keys() if checkpoint[tp] != snapshot[tp])
        shown = ", ".join(f"{t}-{p}: checkpoint {checkpoint[(t, p)]}, offsets_db {snapshot[(t, p)]}"
                          for t, p in differ[:10])
        super().__init__(
            f"the Spark checkpoint of job {job!r} disagrees with offsets_db ({shown}). offsets_db holds what "
            "was committed to the sink. To resume from offsets_db, delete the checkpoint directory and restart; "
            "to start this checkpoint's position as a new history, use a new job name.")


class ForeignCheckpoint(CheckpointMismatch):
    """A Spark checkpoint that cannot be this job's: the job has no position yet, or none of the checkpoint's
    partitions is one the job has read."""

    def __init__(self, job: str, checkpoint: dict[tuple[str, int], int], reason: str) -> None:
        self.job, self.checkpoint, self.snapshot = job, checkpoint, {}
        shown = ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(checkpoint.items())[:10])
        ProtocolError.__init__(
            self, f"the Spark checkpoint given to job {job!r} ({shown}) is not this job's: {reason}. Give the "
            "job its own checkpoint directory (or delete this one to start from startingOffsets and offsets_db)")


class JobBusy(ProtocolError):
    """Another launch holds the job (docs/guarantees.md); the message names it: run id, host,
    pid and for how long. Also a migration refused while streams hold their jobs."""

    kind = HELD


class Fenced(ProtocolError):
    """This launch no longer holds its job (another launch took it over): it may neither plan nor commit."""

    kind = REFUSAL


class JobKindMismatch(ProtocolError, ValueError):
    """A job name used for another kind of job (a backfill under a stream's name)."""

    kind = REFUSAL


class StackError(StreamfillError):
    """A local service could not be started, reached or stopped; the message says which and what to do."""

    kind = OUTAGE


class AirflowError(StreamfillError):
    """Airflow's REST API refused a call or a DAG run did not succeed."""


class AirflowUnreachable(AirflowError):
    """Airflow's REST API did not answer at all."""

    kind = OUTAGE


class QualityFailed(StreamfillError, AssertionError):
    """A failing expectation: the task fails, the result is stored."""

    kind = FAILED


class UnknownJob(StreamfillError, LookupError):
    """A job name offsets_db has never seen; the message lists the known ones where it can."""

    kind = BAD_INPUT


class MissingGrant(StreamfillError, PermissionError):
    """The database role lacks a privilege a launch needs; the message names it and the GRANT that gives it."""

    kind = REFUSAL


class RevisionMismatch(StreamfillError):
    """offsets_db stands at another migration revision than this code's; the message names both and the fix."""

    kind = REFUSAL


class MissingExtra(StreamfillError, ImportError):
    """A part of streamfill imported where its role is not installed; the message names the extra that installs
    it (streamfill/extras.py)."""

    kind = REFUSAL


def kind_of(exc: BaseException | None) -> str | None:
    """One of the kinds above, or None: what `exc` says of itself (an error not streamfill's says nothing)."""
    return exc.kind if isinstance(exc, StreamfillError) else None


def first_lines(exc: BaseException, n: int = 6) -> str:
    """Spark's errors carry a JVM stack; the cause people need is in the first lines."""
    lines = [line for line in str(exc).splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return "\n".join(lines[:n])

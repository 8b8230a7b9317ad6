"""Option values the data sources share: `streamfill_kafka` and `streamfill_postgres` read a boolean and the
launch's hold on the job (`jobGeneration`) the same way and refuse them in the same words. Both keep their
options under lower-cased keys."""

from __future__ import annotations

from collections.abc import Mapping

from streamfill.errors import OptionError


def boolean(opts: Mapping[str, str], name: str, default: bool = False) -> bool:
    """Option `name` as true or false, in any case; `default` when it is not given."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if str(raw).lower() in ("true", "false"):
        return str(raw).lower() == "true"
    raise OptionError(name, raw, "is not a boolean", "Use true or false")


def job_generation(opts: Mapping[str, str], job: str | None, needed_by: str | None) -> int | None:
    """`jobGeneration`: the generation of the launch's hold on `job` (docs/guarantees.md), a positive whole number
    given with the job option. `needed_by` names the bounded read or write that cannot commit without it, and
    why; None where it may be left out (a stream's source takes the job itself)."""
    raw = opts.get("jobgeneration")
    if raw is None:
        if needed_by is not None:
            raise OptionError("jobGeneration", None, f"is needed by {needed_by}", "Take the job first and pass its "
                              "generation to the read and the write (streamfill.connectors.spark.hold_job), or run it as "
                              "`streamfill backfill`")
        return None
    if job is None or not raw.isdigit() or int(raw) < 1:
        raise OptionError("jobGeneration", raw, "must be a positive whole number, with the job option",
                          "Leave it out (the source holds the job), or pass the generation of the launch's lease")
    return int(raw)

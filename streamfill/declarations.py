"""A data source option declared once (its key, default and the docs row that explains it), and the values the
data sources share: `streamfill_kafka` and `streamfill_postgres` read a boolean and the launch's hold on the job
(`jobGeneration`) the same way and refuse them in the same words. Both keep their options under lower-cased keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streamfill.errors import OptionError


@dataclass(frozen=True)
class Option:
    """One option as a user writes it. `doc` is the meaning its docs row gives (markdown; `{default}` stands for
    the default); options of one `group` share the row of the first declared, whose `label` (when given) is the
    row's first cell instead of the keys."""

    key: str
    doc: str = ""
    default: str | None = None  # as a user would write it; None: the parse decides, or there is none
    required: bool = False
    group: str | None = None
    label: str | None = None

    @property
    def name(self) -> str:
        """The key as Spark hands it over: options are case-insensitive, so every parse reads them lower-cased."""
        return self.key.lower()

    def raw(self, opts: Mapping[str, str]) -> str | None:
        """The value given in `opts` (lower-cased keys), else the declared default."""
        return opts.get(self.name, self.default)

    @property
    def prefix(self) -> str:
        """What a family's key (`kafka.*`) starts every member's key with."""
        return self.key.removesuffix("*")

    @property
    def meaning(self) -> str:
        return self.doc.replace("{default}", self.default or "")


def boolean(opts: Mapping[str, str], option: Option) -> bool:
    """`option` as true or false, in any case; its default (false when it has none) when it is not given."""
    raw = option.raw(opts)
    if raw is None:
        return False
    if str(raw).lower() in ("true", "false"):
        return str(raw).lower() == "true"
    raise OptionError(option.key, raw, "is not a boolean", "Use true or false")


def job_generation(opts: Mapping[str, str], option: Option, job: str | None, needed_by: str | None) -> int | None:
    """`option` (`jobGeneration`): the generation of the launch's hold on `job` (docs/guarantees.md), a positive
    whole number given with the job option. `needed_by` names the bounded read or write that cannot commit without
    it, and why; None where it may be left out (a stream's source takes the job itself)."""
    raw = opts.get(option.name)
    if raw is None:
        if needed_by is not None:
            raise OptionError(option.key, None, f"is needed by {needed_by}", "Take the job first and pass its "
                              "generation to the read and the write (streamfill.connectors.spark.hold_job), or run it "
                              "as `streamfill backfill`")
        return None
    if job is None or not raw.isdigit() or int(raw) < 1:
        raise OptionError(option.key, raw, "must be a positive whole number, with the job option",
                          "Leave it out (the source holds the job), or pass the generation of the launch's lease")
    return int(raw)

"""A job's arguments on a spark-submit command line: one flag per field of its argument dataclass, written for a
launch and read back by the job's entry point."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from streamfill.console import refusals, tell
from streamfill.settings import as_command

A = TypeVar("A")


def flag(name: str) -> str:
    """A field's command-line flag: `max_offsets_per_trigger` is `--max-offsets-per-trigger`, `from_` (`from` is a
    Python keyword) is `--from`."""
    return "--" + name.rstrip("_").replace("_", "-")


def parse_argv(cls: type[A], argv: Sequence[str], prog: str, extra: Sequence[str] = ("master",)) -> tuple[A, dict]:
    """A job's arguments from a spark-submit command line, one flag per dataclass field (the same flags as the
    `streamfill` command). Returns the arguments and the values of `extra` flags (e.g. --master)."""
    parser = argparse.ArgumentParser(prog=prog)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        parser.add_argument(flag(name), dest=name, required=required and name not in getattr(cls, "DERIVED", ()))
    for name in extra:
        parser.add_argument(flag(name), dest=name)
    ns = vars(parser.parse_args(list(argv)))
    given = {k: _typed(fields[k], v) for k, v in ns.items() if k in fields and v is not None}
    return cls.from_flags(**given), {k: ns[k] for k in extra}


def argv(cls: type, **values: object) -> list[str]:
    """The command line `parse_argv` reads back into `cls`: each value under its field's flag, in the order given
    (None left out), for a task that launches the job with spark-submit. A name that is no field is refused."""
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    return [part for name, value in values.items() if value is not None for part in (flag(name), str(value))]


def submit_main(cls: type[A], launch: Callable[[A, str | None], object], argv: Sequence[str], prog: str) -> int:
    """A job's spark-submit entry: its flags into its argument model (refused with the flag, the value and the
    fix), then its launch on the --master given (or the settings'). Like a `streamfill` command, it says which of
    the local stack's addresses it takes, and ends with the exit code of what ended it (console.EXIT_CODES), for
    the task that launched it."""
    from streamfill.spark_jobs.exits import ended

    with as_command(tell):
        try:
            with refusals():
                args, extra = parse_argv(cls, argv, prog)
            launch(args, extra["master"])
        except Exception as exc:
            raise ended(exc) from None
    return 0


def _typed(f: dataclasses.Field, value: str):
    kind = str(f.type)
    return int(value) if "int" in kind and value.lstrip("-").isdigit() else value

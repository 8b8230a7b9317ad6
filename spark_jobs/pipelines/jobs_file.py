"""The jobs file: `dags/streamfill_jobs.yaml` (or STREAMFILL_JOBS_FILE) and every `jobs.d/*.yaml` beside it, one
pipeline entry per job. Read entry by entry: a bad entry names the file, the job, the field, the value and the
fix, and is broken alone (`load_each`): the DAG files and a launch keep every other entry. `load` and `read`
refuse a file with any broken entry, naming each."""

from __future__ import annotations

import difflib
import json
import os
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from streamfill import REPO_ROOT
from streamfill.errors import BAD_INPUT, OptionError, StreamfillError
from streamfill.spark_jobs.pipelines.spec import PipelineSpec


class JobsFileError(StreamfillError, ValueError):
    """A jobs file that cannot be used: the message names the file, the job and the field."""

    kind = BAD_INPUT


def jobs_file() -> Path:
    return Path(os.environ.get("STREAMFILL_JOBS_FILE") or REPO_ROOT / "dags" / "streamfill_jobs.yaml")


@dataclass(frozen=True)
class BrokenEntry:
    """An entry that cannot be used, or a whole file (`job` None: unreadable, or no `jobs:` mapping)."""

    file: Path
    job: str | None
    error: JobsFileError


@dataclass(frozen=True)
class Entries:
    """A jobs file read entry by entry: every entry that can be used, and each one that cannot."""

    path: Path
    specs: dict[str, PipelineSpec]
    broken: tuple[BrokenEntry, ...] = ()

    def strict(self) -> dict[str, PipelineSpec]:
        """The entries, or a JobsFileError naming every broken one."""
        if self.broken:
            raise JobsFileError("\n".join(str(b.error) for b in self.broken))
        return self.specs

    def spec(self, name: str, option: str = "--pipeline") -> PipelineSpec:
        """Entry `name`: its own error when it is broken, another entry's never."""
        if name in self.specs:
            return self.specs[name]
        own = next((b.error for b in self.broken if b.job == name), None)
        if own is not None:
            raise own
        unreadable = next((b.error for b in self.broken if b.job is None and b.file == self.path), None)
        if unreadable is not None:  # the jobs file itself: no entry of it can be told apart
            raise unreadable
        unread = [str(b.error) for b in self.broken if b.job is None]
        problem = f"is not an entry of the jobs file {self.path}" + (
            f" (it may be in a file that cannot be read: {'; '.join(unread)})" if unread else "")
        raise OptionError(option, name, problem,
                          f"use one of {', '.join(sorted(self.specs)) or 'none yet'}, or add an entry under jobs:")


def load(path: Path | None = None) -> dict[str, PipelineSpec]:
    """The jobs file, plus one file per job in the `jobs.d/` folder beside it (a job added by dropping a file);
    a JobsFileError naming every broken entry if one is."""
    return load_each(path).strict()


def read(path: Path, required: bool = True) -> dict[str, PipelineSpec]:
    """The entries of one file; a JobsFileError naming every broken entry if one is."""
    return read_each(path, required).strict()


def load_each(path: Path | None = None) -> Entries:
    """The jobs file and `jobs.d/*.yaml`, entry by entry. A name defined twice is broken where it comes again
    (the jobs file first, then jobs.d/ in name order), so a dropped file cannot take over an entry."""
    path = path or jobs_file()
    files = [(path, True), *((extra, False) for extra in sorted((path.parent / "jobs.d").glob("*.yaml")))]
    return _gathered(path, files)


def read_each(path: Path, required: bool = True) -> Entries:
    """The entries of one file, entry by entry."""
    return _gathered(path, [(path, required)])


def _gathered(path: Path, files: list[tuple[Path, bool]]) -> Entries:
    specs: dict[str, PipelineSpec] = {}
    broken: list[BrokenEntry] = []
    defined: dict[str, Path] = {}
    for source, required in files:
        for name, got in _each(source, required):
            if name is not None and name in defined:
                got = JobsFileError(f"{source}: job {name!r} is already defined in {defined[name]}; give it another "
                                    "name")
            elif name is not None:
                defined[name] = source
            if isinstance(got, JobsFileError):
                broken.append(BrokenEntry(source, name, got))
            else:
                specs[name] = got
    return Entries(path, specs, tuple(broken))


def _each(path: Path, required: bool) -> Iterator[tuple[str | None, PipelineSpec | JobsFileError]]:
    """(job, its entry or why it cannot be used) per entry of one file, in order; (None, why) for the whole file."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        yield None, JobsFileError(f"cannot read the jobs file {path}: {exc}")
        return
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    if not isinstance(jobs, dict) or (required and not jobs):
        yield None, JobsFileError(f"{path} must have a `jobs:` mapping of job name to its settings")
        return
    for name, body in jobs.items():
        try:
            yield name, _entry(path, name, body)
        except JobsFileError as exc:
            yield name, exc
        except Exception as exc:  # a check's own failure on an input it did not foresee is still this entry's alone
            yield name, JobsFileError(f"{path}: job {name!r}: cannot be read ({type(exc).__name__}: {exc}); "
                                      "fix the entry's settings (docs/pipelines.md lists every setting)")


def _entry(path: Path, name: str, body: object) -> PipelineSpec:
    if not isinstance(body, dict) or not all(isinstance(key, str) for key in body):
        raise JobsFileError(f"{path}: job {name!r}: its settings must be a mapping of setting names (topic, columns, "
                            "table, ...)")
    try:
        spec = PipelineSpec(name=name, **body)
    except ValidationError as exc:
        raise JobsFileError(f"{path}: job {name!r}: " + "; ".join(_describe(e) for e in exc.errors())) from None
    spec._folder = path.parent
    if spec.avro_schema:
        _check_avro(path, spec)
    return spec


def _describe(error: dict) -> str:
    """`columns.amount.type 'money': <what is wrong and the fix>`; entry-wide rules name their fields themselves."""
    where = ".".join(str(p) for p in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if not where:
        return message
    if error["type"] == "extra_forbidden":
        known = _keys_at(error["loc"][:-1])
        close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1, cutoff=0.7)
        hint = f": did you mean {close[0]!r}?" if close else "."
        return f"{where}\n  is not a setting here{hint} The settings are: {', '.join(known)}"
    if error["type"] == "missing":
        return f"{where}\n  is required: add `{error['loc'][-1]}:` to the entry (docs/pipelines.md lists every setting)"
    shown = error.get("input")
    value = "" if isinstance(shown, dict) else f" = {shown!r}"
    return f"{where}{value}: {message}"


def _keys_at(loc: tuple) -> list[str]:
    """The keys the entry's model accepts at `loc` (the entry itself, a column, health)."""
    model: type[BaseModel] = PipelineSpec
    parts = list(loc)
    while parts:
        found = model.model_fields.get(str(parts.pop(0)))
        if found is None:
            return []
        inner = found.annotation
        if typing.get_origin(inner) is dict:  # columns: {name: ColumnSpec}: skip the name
            inner = typing.get_args(inner)[1]
            if parts:
                parts.pop(0)
        # an optional setting (route: Route | None) lists the model's keys
        inner = next((a for a in typing.get_args(inner) if isinstance(a, type) and issubclass(a, BaseModel)), inner)
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return []
        model = inner
    return [f.alias or n for n, f in model.model_fields.items() if n != "name"]


def _check_avro(path: Path, spec: PipelineSpec) -> None:
    """The schema file exists, parses, and has a field for every declared column."""
    import fastavro

    schema_path = spec.avro_schema_path
    where = f"{path}: job {spec.name!r}: avro_schema {spec.avro_schema!r}"
    try:
        schema = json.loads(schema_path.read_text())
    except OSError as exc:
        raise JobsFileError(f"{where}: cannot read {schema_path} ({exc.strerror}); give a path relative to "
                            f"{path.parent}") from None
    except json.JSONDecodeError as exc:
        raise JobsFileError(f"{where}: {schema_path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several kinds for a bad schema
        raise JobsFileError(f"{where}: {schema_path} is not an Avro schema ({exc})") from None
    fields = {f["name"] for f in parsed.get("fields", [])} if isinstance(parsed, dict) else set()
    missing = [name for name, column in spec.columns.items() if (column.field or name).split(".")[0] not in fields]
    if missing:
        raise JobsFileError(f"{where}: the schema has no field for column(s) {', '.join(missing)} (fields: "
                            f"{', '.join(sorted(fields)) or 'none'}); fix the column's field or the schema")

"""The jobs file: `dags/streamfill_jobs.yaml` (or STREAMFILL_JOBS_FILE) and every `jobs.d/*.yaml` beside it, one
pipeline entry per job. Validated when loaded: a bad entry names the file, the job, the field, the value and
the fix, and nothing else is loaded from a file that has one."""

from __future__ import annotations

import difflib
import json
import os
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from streamfill import REPO_ROOT
from streamfill.errors import StreamfillError
from streamfill.spark_jobs.pipelines.spec import PipelineSpec


class JobsFileError(StreamfillError, ValueError):
    """A jobs file that cannot be used: the message names the file, the job and the field."""


def jobs_file() -> Path:
    return Path(os.environ.get("STREAMFILL_JOBS_FILE") or REPO_ROOT / "dags" / "streamfill_jobs.yaml")


def load(path: Path | None = None) -> dict[str, PipelineSpec]:
    """The jobs file, plus one file per job in the `jobs.d/` folder beside it (a job added by dropping a file)."""
    path = path or jobs_file()
    out = read(path, required=True)
    for extra in sorted((path.parent / "jobs.d").glob("*.yaml")):
        for name, spec in read(extra, required=False).items():
            if name in out:
                raise JobsFileError(f"{extra}: job {name!r} is already defined in {path}; give it another name")
            out[name] = spec
    return out


def read(path: Path, required: bool = True) -> dict[str, PipelineSpec]:
    """The entries of one file."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise JobsFileError(f"cannot read the jobs file {path}: {exc}") from None
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    if not isinstance(jobs, dict) or (required and not jobs):
        raise JobsFileError(f"{path} must have a `jobs:` mapping of job name to its settings")
    out = {}
    for name, body in jobs.items():
        if not isinstance(body, dict):
            raise JobsFileError(f"{path}: job {name!r}: its settings must be a mapping (topic, columns, table, ...)")
        try:
            spec = PipelineSpec(name=name, **body)
        except ValidationError as exc:
            raise JobsFileError(f"{path}: job {name!r}: " + "; ".join(_describe(e) for e in exc.errors())) from None
        spec._folder = path.parent
        if spec.avro_schema:
            _check_avro(path, spec)
        out[name] = spec
    return out


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

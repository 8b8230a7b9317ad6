"""Checks an OpenLineage event against the specification's JSON schemas (tests/openlineage_spec): the event by its
`schemaURL`, and every facet by its `_schemaURL`, under the key and in the place (run, job, dataset, input or
output facets) that schema gives it. The core schema does not look into facets, so each is checked on its own."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SPEC = Path(__file__).with_name("openlineage_spec")
CORE_DEFS = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/"
# where a facet sits -> the core facet type its schema must extend
PLACES = {"facets@run": "RunFacet", "facets@job": "JobFacet", "facets@dataset": "DatasetFacet",
          "inputFacets": "InputDatasetFacet", "outputFacets": "OutputDatasetFacet"}


@functools.cache
def _schemas() -> dict[str, dict]:
    files = [SPEC / "OpenLineage.json", *sorted((SPEC / "facets").glob("*.json"))]
    return {s["$id"]: s for s in (json.loads(f.read_text()) for f in files)}


@functools.cache
def _registry() -> Registry:
    return Registry().with_resources((uri, Resource.from_contents(s)) for uri, s in _schemas().items())


def _check(instance: dict, url: str, where: str) -> list[str]:
    base = url.split("#", 1)[0]
    if base not in _schemas():
        return [f"{where}: schema {url} is not vendored in {SPEC.name}"]
    validator = Draft202012Validator({"$ref": url}, registry=_registry(),
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [f"{where}{''.join(f'/{p}' for p in e.absolute_path)}: {e.message}"
            for e in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))]


def _facet_problems(key: str, facet: object, place: str, where: str) -> list[str]:
    where = f"{where}.{key}"
    if not isinstance(facet, dict):
        return [f"{where}: a facet is an object, not {type(facet).__name__}"]
    url = facet.get("_schemaURL")
    if not url:
        return [] if facet.get("_deleted") else [f"{where}: has no _schemaURL"]
    base, _, pointer = url.partition("#")
    if base not in _schemas():
        return _check(facet, url, where)  # names the missing file
    found = _check(facet, url, where)
    schema = _schemas()[base]
    named = {p.get("$ref", "").rpartition("/")[2]: k for k, p in schema.get("properties", {}).items()}
    own = pointer.rpartition("/")[2]
    if own in named and named[own] != key:
        found.append(f"{where}: {own} goes under the key {named[own]!r}, not {key!r}")
    extends = [part.get("$ref", "") for part in schema.get("$defs", {}).get(own, {}).get("allOf", [])]
    wanted = PLACES[place]
    if not any(ref == CORE_DEFS + wanted for ref in extends):
        kinds = [ref.rpartition("/")[2] for ref in extends if ref.startswith(CORE_DEFS)]
        found.append(f"{where}: {own} extends {', '.join(kinds) or 'no core facet type'}, not {wanted}")
    return found


def problems(event: dict) -> list[str]:
    """Every way `event` departs from the schemas: [] for a valid event."""
    url = event.get("schemaURL") if isinstance(event, dict) else None
    if not url:
        return ["event: has no schemaURL"]
    found = _check(event, url, "event")
    groups = [("run", "facets@run", (event.get("run") or {}).get("facets")),
              ("job", "facets@job", (event.get("job") or {}).get("facets"))]
    for side in ("inputs", "outputs"):
        for i, ds in enumerate(event.get(side) or []):
            where = f"{side}[{i}]"
            groups.append((where, "facets@dataset", ds.get("facets")))
            extra = "inputFacets" if side == "inputs" else "outputFacets"
            groups.append((f"{where}.{extra}", extra, ds.get(extra)))
    for where, place, facets in groups:
        for key, facet in (facets or {}).items():
            found += _facet_problems(key, facet, place, where)
    return found

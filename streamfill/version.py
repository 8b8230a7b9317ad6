"""streamfill's version: what a build of the checkout is numbered, what `streamfill --version` prints and what a
release needs.

The version being made is named once, by CHANGELOG.md's top section: `## 0.2.0 (unreleased)` while it is made,
`## 0.2.0 - 2026-12-08` once released. A build of a commit tagged with a version (v0.2.0) is that version; any
other build is a development release of the top section's version, `0.2.0.devN+g<commit>` (N commits since the
last tag, or since the first commit in a clone without tags), or of the next patch (0.2.1.devN) once the top
section is released. setup.py numbers every build so (pip, `python -m build`, an editable install alike).

Only the standard library is imported at the top: setup.py loads this file by its path, in a build environment
where streamfill is not installed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

DISTRIBUTION = "streamfill"
CHANGELOG = "CHANGELOG.md"
UNRELEASED = "(unreleased)"
# a section's heading: `## 0.2.0 (unreleased)` or `## 0.2.0 - 2026-12-08`
HEADING = re.compile(r"## (?P<version>\d+\.\d+\.\d+)(?: \(unreleased\)| - (?P<date>\d{4}-\d{2}-\d{2}))\s*")
RELEASE = re.compile(r"\d+\.\d+\.\d+")  # what a release is numbered: no dev, pre or local part


@dataclass(frozen=True)
class Section:
    """CHANGELOG.md's top section: the version it names and the day it was released (None: not yet)."""

    version: str
    released: date | None


def top_section(changelog: str) -> Section:
    """The first `## ` heading of the CHANGELOG's text; a ValueError naming it when it is neither form."""
    heading = next((line for line in changelog.splitlines() if line.startswith("## ")), None)
    found = HEADING.fullmatch(heading or "")
    if found is None:
        raise ValueError(f"{CHANGELOG}'s top section {heading!r} names no version: head it `## X.Y.Z {UNRELEASED}` "
                         "while it is made, `## X.Y.Z - YYYY-MM-DD` once released")
    day = found["date"]
    return Section(found["version"], date.fromisoformat(day) if day else None)


def read_top(root: Path) -> Section:
    return top_section((root / CHANGELOG).read_text(encoding="utf-8"))


def development(section: Section, distance: int) -> str:
    """A build between releases: the top section's version while it is unreleased, else the next patch."""
    if section.released is None:
        base = section.version
    else:
        major, minor, patch = section.version.split(".")
        base = f"{major}.{minor}.{int(patch) + 1}"
    return f"{base}.dev{distance}"


def scheme(root: Path) -> Callable[[object], str]:
    """setuptools-scm's version_scheme for the checkout at `root`: its ScmVersion in, the version out."""

    def number(scm) -> str:
        if scm.exact:  # at a tag, with no change to the tree
            return scm.format_with("{tag}")
        return development(read_top(root), scm.distance)

    return number


def scm_settings(root: Path) -> dict:
    """setuptools-scm's settings for the checkout at `root` (setup.py's use_scm_version): a tree without git and
    without a sdist's metadata is a development release of the top section too."""
    return {"version_scheme": scheme(root), "fallback_version": development(read_top(root), 0)}


def build_version(root: Path) -> str:
    """The version a build of the checkout at `root` gets, as setup.py numbers it (needs setuptools-scm)."""
    from setuptools_scm import get_version

    return get_version(root=str(root), **scm_settings(root))


def installed() -> str:
    """The installed distribution's version, what `streamfill --version` prints."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (streamfill runs from a source tree that was never installed: pip install -e .)"


def release_refusal(version: str, changelog: str) -> str | None:
    """Why a build numbered `version` may not be released with this CHANGELOG text, or None when it may."""
    top = top_section(changelog)
    steps = (f"date the top section (`## {top.version} - {date.today().isoformat()}`), commit it and tag the commit "
             f"v{top.version}")
    if top.released is None:
        return f"{CHANGELOG}'s top section `## {top.version} {UNRELEASED}` is not released: {steps}"
    if not RELEASE.fullmatch(version):
        return (f"this build is {version}, a development release: a release is built at the commit tagged "
                f"v{top.version} ({CHANGELOG}'s top section) with no change left uncommitted")
    if version != top.version:
        return (f"this build is {version} but {CHANGELOG}'s top section names {top.version}: tag the commit "
                f"v{top.version}, or head the top section `## {version} - {top.released.isoformat()}`")
    return None


def main(argv: list[str]) -> int:
    """`python -m streamfill.version [--release] [ROOT]`: the version a build of ROOT (default: the current
    directory) gets; with --release, refuse (exit 1, naming what to do) unless it may be released."""
    release = "--release" in argv
    rest = [a for a in argv if a != "--release"]
    root = Path(rest[0] if rest else ".").resolve()
    version = build_version(root)
    refusal = release_refusal(version, (root / CHANGELOG).read_text(encoding="utf-8")) if release else None
    if refusal:
        print(f"refused: {refusal}", file=sys.stderr)
        return 1
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

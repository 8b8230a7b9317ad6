"""The project's code for Spark executors that do not have streamfill installed: one zip of the packages the jobs
import, which a launch on a cluster master ships (`spark-submit --py-files`, or `addPyFile` in a session built
in-process). Executors import from it with Python's zipimport; local masters ship nothing.

The zip is built once for each content of those packages, under `<home>/spark/`: its name carries a digest of
every file in it, so an edit or an upgrade makes a new one and an unchanged install reuses the last. Files that
are not Python (package data) go in too. STREAMFILL_SPARK_PY_FILES names an archive of the user's own instead:
a zip, or a wheel of the project (`pip wheel --no-deps .`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

from streamfill import SUBPACKAGES
from streamfill.errors import OptionError, StreamfillError

OVERRIDE_ENV = "STREAMFILL_SPARK_PY_FILES"
# what the jobs import, on the driver and in the executors: the layering keeps them off orchestration and cli
PACKAGES = ("streamfill", "streamfill.connectors", "streamfill.offsets_db", "streamfill.spark_jobs")
# the archives Spark puts on a Python worker's sys.path (PySpark's SparkContext.PACKAGE_EXTENSIONS, less .jar)
IMPORTABLE = (".zip", ".egg")
_STAMP = (1980, 1, 1, 0, 0, 0)  # every entry's time, so the same files make the same bytes


def ships(master: str) -> bool:
    """Whether a launch on `master` ships the archive: on a local master the executors are this install."""
    return not master.startswith("local")


def from_archive() -> bool:
    """Whether this process imports the project from a shipped archive (a driver under spark-submit
    --py-files): the launch has shipped it already, and there are no package folders here to build from."""
    return not Path(__file__).is_file()


def package_roots(names: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Each package's folder in this interpreter's install (the repository's, for an editable install)."""
    roots = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        folders = list(spec.submodule_search_locations or []) if spec else []
        if not folders or not Path(folders[0]).is_dir():
            raise StreamfillError(f"package {name} is not a folder here ({folders or 'not found'}), so its files "
                                  f"cannot be zipped for the executors; set {OVERRIDE_ENV} to an archive of "
                                  "streamfill's packages")
        roots[name] = Path(folders[0])
    return roots


def archive_files(roots: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(name in the archive, file) for every file of the packages, sorted; compiled caches and hidden files are
    left out, package data is not. The base package's folder holds the subpackages in an installed wheel (and
    not in a checkout): they come from their own roots, and those the jobs do not import stay out."""
    out = []
    for name, root in roots.items():
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if name == "streamfill" and len(rel.parts) > 1 and rel.parts[0] in SUBPACKAGES:
                continue
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo") \
                    and not any(part.startswith(".") for part in rel.parts):
                out.append((f"{name.replace('.', '/')}/{rel.as_posix()}", path))
    return sorted(out)


def digest(contents: list[tuple[str, bytes]]) -> str:
    """A digest of the names and bytes of the archive's files."""
    h = hashlib.sha256()
    for name, data in contents:
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]


def build(cache: Path, roots: Mapping[str, Path] | None = None) -> Path:
    """The zip of the packages' files as they are now, in `cache`: made unless the one of their digest exists.
    Files are read once, so the zip holds the bytes its name was computed from."""
    contents = [(name, path.read_bytes()) for name, path in archive_files(roots or package_roots())]
    path = cache / f"streamfill-py-{digest(contents)}.zip"
    if not path.is_file():
        _put(path, _zipped(contents))
    return path


def user_archive(value: str, cache: Path) -> Path:
    """The archive STREAMFILL_SPARK_PY_FILES names, as a file Spark puts on the executors' sys.path."""
    path = Path(value).expanduser()
    if path.suffix.lower() not in (*IMPORTABLE, ".whl"):
        raise OptionError(OVERRIDE_ENV, value, "is not a .zip, .egg or .whl file",
                          "Name a zip of streamfill's packages or a wheel of the project (pip wheel --no-deps .)")
    if not path.is_file():
        raise OptionError(OVERRIDE_ENV, value, "is not a file here",
                          "Give the path of the archive on this machine, or unset it to ship the installed code")
    if path.suffix.lower() in IMPORTABLE:
        return path.resolve()
    # a wheel is a zip with the packages at its root, but Spark adds only .zip, .egg and .jar files to a worker's
    # sys.path: the executors get a copy named .zip
    data = path.read_bytes()
    copy = cache / f"{path.stem}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not copy.is_file():
        _put(copy, data)
    return copy


def archive(home: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """What a launch on a cluster master ships: the user's archive (STREAMFILL_SPARK_PY_FILES) when set, else the
    installed packages' zip, cached under `home`."""
    cache = home / "spark"
    override = environ.get(OVERRIDE_ENV, "").strip()
    return user_archive(override, cache) if override else build(cache)


def driver_paths(home: Path) -> dict[str, str]:
    """STREAMFILL_HOME and STREAMFILL_JOBS_FILE as this install resolves them, for a driver under spark-submit
    --py-files: it imports the project from the archive, where their defaults (beside the repository,
    streamfill.REPO_ROOT) would name paths inside the zip."""
    from streamfill.spark_jobs.pipelines import jobs_file

    return {"STREAMFILL_HOME": str(home), "STREAMFILL_JOBS_FILE": str(jobs_file())}


def _zipped(contents: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in contents:
            info = zipfile.ZipInfo(name, _STAMP)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def _put(path: Path, data: bytes) -> None:
    """Written under a temporary name first, so no launch ships half an archive."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)

"""`make test-matrix`: the unit tests and one backfill on every supported Python, each in a fresh venv that
installs the project within pyproject.toml's ranges at their newest (pip's choice; not the constraints file: a
team's environment resolves its own versions), and once more at their lowest: the oldest Python with the oldest
supported Airflow and the lowest version of every other dependency the ranges allow (uv's
`--resolution lowest-direct`). The backfill runs against the local stack (`streamfill stack up` first). Prints each
row and writes the table between the markers of docs/requirements.md, with the date and the versions resolved.

    python -m tests.matrix [--only 3.12] [--keep]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from streamfill import REPO_ROOT
from tests.packaging import pyproject

PYTHONS = ("3.11", "3.12", "3.13")  # pyproject.toml's requires-python
PAGE = REPO_ROOT / "docs" / "requirements.md"
BEGIN, END = "<!-- matrix: begin -->", "<!-- matrix: end -->"
WORK = REPO_ROOT / ".matrix"
VERSIONS = ("apache-airflow", "pyspark", "great-expectations", "sqlalchemy", "pandas", "numpy", "pyarrow",
            "confluent-kafka", "openlineage-python")


def interpreter(version: str) -> Path:
    """python<version> from PATH (Debian's packages), else pyenv's newest of that minor version."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", "import venv"], capture_output=True).returncode == 0:
        return Path(found)
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob(f"{version}.*"))
    if not pyenv:
        raise SystemExit(f"no Python {version}: install python{version} (apt-get) or `pyenv install {version}`")
    return pyenv[-1] / "bin" / "python"


def oldest_airflow() -> str:
    spec = next(d for d in pyproject()["project"]["optional-dependencies"]["airflow"] if d.startswith("apache-airflow>"))
    return re.search(r">=([\d.]+)", spec)[1]


def run(cmd: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, **kw)


def one(version: str, airflow: str | None) -> dict:
    """A fresh venv on Python `version`: install (the newest the ranges allow, or with `airflow` given, Airflow at
    that version and the lowest of everything else), unit tests, a backfill."""
    name = f"py{version}" + (f"-lowest-airflow{airflow}" if airflow else "")
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "log.txt"
    started = time.monotonic()
    row = {"python": version, "resolution": "lowest" if airflow else "newest", "log": str(log.relative_to(REPO_ROOT))}
    subprocess.run([str(interpreter(version)), "-m", "venv", str(folder / "venv")], check=True)
    bin_ = folder / "venv" / "bin"
    run([str(bin_ / "pip"), "install", "-q", "-U", "pip", *(["uv"] if airflow else [])], log, check=True)
    install = [str(bin_ / "uv"), "pip", "install", "--python", str(bin_ / "python"), "--resolution", "lowest-direct",
               f"apache-airflow=={airflow}"] if airflow else [str(bin_ / "pip"), "install", "-q"]
    if run([*install, "-e", f"{REPO_ROOT}[all,dev]"], log).returncode:
        return {**row, "install": "failed", "unit": "-", "backfill": "-"}
    frozen = run([str(bin_ / "pip"), "freeze"], folder / "freeze.txt")
    pins = dict(line.lower().split("==", 1) for line in (folder / "freeze.txt").read_text().splitlines()
                if "==" in line and not line.startswith("$"))
    row["versions"] = {p: pins.get(p.lower(), pins.get(p.lower().replace("-", "_"), "?")) for p in VERSIONS}
    assert frozen.returncode == 0
    unit = run([str(bin_ / "pytest"), "-q", "-m", "unit", "-n", "2", "-p", "no:cacheprovider"], log, cwd=REPO_ROOT)
    row["unit"] = "passed" if unit.returncode == 0 else "failed"
    topic = f"t_matrix_{uuid.uuid4().hex[:8]}"
    produced = run([str(bin_ / "streamfill"), "produce", "--topic", topic, "--count", "2000"], log, cwd=REPO_ROOT)
    backfill = run([str(bin_ / "streamfill"), "backfill", "--job", topic, "--topic", topic, "--pipeline", "orders",
                    "--from", "earliest", "--to", "latest"], log, cwd=REPO_ROOT) if produced.returncode == 0 else produced
    row["backfill"] = "passed" if backfill.returncode == 0 else "failed"
    row["minutes"] = round((time.monotonic() - started) / 60, 1)
    return row


def table(rows: list[dict], day: str) -> str:
    lines = [f"Last run {day} on Debian 12, Java 17, 2 cores (`make test-matrix`):", "",
             "| Python | ranges at | install | unit tests | backfill | resolved |", "|---|---|---|---|---|---|"]
    for r in rows:
        resolved = ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items())
        lines.append(f"| {r['python']} | {r['resolution']} | {r.get('install', 'passed')} | {r['unit']} | "
                     f"{r['backfill']} | {resolved} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="one Python version, e.g. 3.12 (the page is not written)")
    args = parser.parse_args()
    plan = [(v, None) for v in PYTHONS] + [(PYTHONS[0], oldest_airflow())]
    if args.only:
        plan = [p for p in plan if p[0] == args.only]
    rows = []
    for version, airflow in plan:
        row = one(version, airflow)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if not args.only:
        page = PAGE.read_text()
        before, rest = page.split(BEGIN)
        PAGE.write_text(f"{before}{BEGIN}\n{table(rows, dt.date.today().isoformat())}\n{END}{rest.split(END)[1]}")
    if any(r.get("install") == "failed" or "failed" in (r["unit"], r["backfill"]) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()

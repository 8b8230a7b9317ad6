"""The check most teams run in CI on their DAG folder: a DagBag of the DAG files in an environment with no
connection, no variable and no database reachable. A secrets backend that refuses every connection and every
variable but `streamfill_jobs_file`, and records what it was asked (tests/refusing_secrets.py), proves the parse
asks for that one variable and nothing else (the DAG processor would ask at every parse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from streamfill import REPO_ROOT, dag_ids
from tests.refusing_secrets import ASKED_FILE

pytestmark = pytest.mark.unit

PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag

def walk(condition):
    return [condition] if hasattr(condition, "uri") else [a for c in getattr(condition, "objects", ()) for a in walk(c)]

def assets(dag):
    scheduled = walk(getattr(dag.timetable, "asset_condition", None))
    return {{a.uri for a in scheduled}} | {{o.uri for t in dag.tasks for o in t.outlets if hasattr(o, "uri")}}

bag = DagBag(dag_folder={folder!r})
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}}, "dags": sorted(bag.dag_ids),
                  "assets": sorted(set().union(*map(assets, bag.dags.values())))}}))
"""


def bare_env(tmp_path, **extra: str) -> dict[str, str]:
    """PATH and HOME only, an empty AIRFLOW_HOME, a metadata database nobody listens on."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT),
            "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://nobody@127.0.0.1:9/none",
            "AIRFLOW__SECRETS__BACKEND": "tests.refusing_secrets.RefusingSecrets",
            ASKED_FILE: str(tmp_path / "secrets-asked.txt"), **extra}


def parse(tmp_path, **extra: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PARSE.format(folder=str(REPO_ROOT / "dags"))], cwd=tmp_path,
                          env=bare_env(tmp_path, **extra), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def asked(tmp_path) -> set[str]:
    """What the parse asked the secrets backend for: `variable <key>` or `connection <id>` per lookup."""
    path = tmp_path / "secrets-asked.txt"
    return set(path.read_text().splitlines()) if path.exists() else set()


def test_the_dag_files_parse_reading_one_variable_and_no_connection_or_database(tmp_path):
    out = parse(tmp_path)
    assert out["errors"] == {}
    # the jobs file's Variable (docs/infrastructure.md, "Into your Airflow 3"), and no other variable or connection
    assert asked(tmp_path) == {"variable streamfill_jobs_file"}, asked(tmp_path)
    assert {dag_ids.REPLAY, dag_ids.MAINTENANCE, dag_ids.stream("orders"), dag_ids.interval("orders")} \
        <= set(out["dags"])
    # the tables' assets are named by the documented default: the local stack's database
    assert "postgres://127.0.0.1:5432/streamfill/public/orders_events" in out["assets"], out["assets"]


def test_the_assets_database_setting_names_the_tables_assets_and_a_bad_one_is_refused(tmp_path):
    out = parse(tmp_path, STREAMFILL_ASSETS_DATABASE="postgres://db.example:6432/analytics")
    assert "postgres://db.example:6432/analytics/public/orders_events" in out["assets"], out["assets"]

    done = subprocess.run([sys.executable, "-c", PARSE.format(folder=str(REPO_ROOT / "dags"))], cwd=tmp_path,
                          env=bare_env(tmp_path, STREAMFILL_ASSETS_DATABASE="analytics"), capture_output=True,
                          text=True, timeout=300)
    bag = json.loads(done.stdout.strip().splitlines()[-1])
    assert bag["dags"] == [] and "STREAMFILL_ASSETS_DATABASE" in " ".join(bag["errors"].values()), bag


def test_a_broken_entry_is_one_import_error_naming_it_and_the_other_entries_dags_load(tmp_path):
    """Airflow records import errors per DAG file and marks every DAG of a file with one stale: the broken entry's
    error is the file streamfill_broken_entries.py's, and the file that builds the others' DAGs has none."""
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text((REPO_ROOT / "dags" / "streamfill_jobs.yaml").read_text() + textwrap.indent(textwrap.dedent("""\
        typo:
          topic: typo
          table: typo_events
          columns: {a: {type: int}}
          schedule: "0 * * *"
        """), "  "))
    out = parse(tmp_path, STREAMFILL_JOBS_FILE=str(jobs))
    assert list(out["errors"]) == [str(REPO_ROOT / "dags" / "streamfill_broken_entries.py")], out["errors"]
    (error,) = out["errors"].values()
    assert f"{jobs}: job 'typo': schedule = '0 * * *': is not a cron schedule Airflow accepts" in error, error
    assert "use five fields (minute hour day-of-month month day-of-week)" in error, error
    assert {dag_ids.REPLAY, dag_ids.MAINTENANCE, *dag_ids.of_entry("orders", True)} <= set(out["dags"])
    assert not any("typo" in d for d in out["dags"]), out["dags"]

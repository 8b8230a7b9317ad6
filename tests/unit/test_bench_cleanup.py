"""A benchmark run removes what it made (bench/cleanup.py): the line it prints, which topics it deletes, and that
one failing step does not stop the others. Nothing here needs the stack."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from streamfill import REPO_ROOT

pytestmark = pytest.mark.unit

_spec = importlib.util.spec_from_file_location("cleanup", REPO_ROOT / "bench" / "cleanup.py")
leftovers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(leftovers)


def test_the_line_counts_what_was_removed():
    removed = {"job": [f"bench-sf-{i}" for i in range(12)], "table": [f"bench_sf_{i}" for i in range(12)],
               "topic": ["bench_e2e_2000000_4"], "local folder": []}
    assert leftovers.summary(removed, [], []) == "removed 12 jobs, 12 tables, 1 topic"
    assert leftovers.summary({}, [], []) == "removed nothing"


def test_a_kept_topic_is_not_deleted_and_is_named():
    made = leftovers.Leftovers(None, keep_topic=True)
    made.topic("bench_e2e_2000000_4", shared=True)
    made.topic("bench_fresh_sf_1a2b3c4d")
    assert made.doomed_topics() == ["bench_fresh_sf_1a2b3c4d"]
    made.keep_topic = False
    assert made.doomed_topics() == ["bench_fresh_sf_1a2b3c4d", "bench_e2e_2000000_4"]
    assert leftovers.summary({}, [], ["bench_e2e_2000000_4"]) == (
        "removed nothing; kept 1 topic (bench_e2e_2000000_4) for the next run (--keep-topic)")


def test_a_failing_step_is_reported_and_the_others_still_run(capsys):
    made = leftovers.Leftovers(None)

    def refused():
        raise RuntimeError("connection refused\ndetails")

    made._jobs, made._tables = refused, lambda: ["bench_sf_1", "_sf_stage_bench_sf_1_ab12"]
    made._topics, made._folders = lambda: ["bench_e2e_20000_4"], lambda: []
    line = made.remove()
    assert line == "removed 2 tables, 1 topic; could not remove jobs (connection refused)"
    assert capsys.readouterr().out.strip() == line


def test_the_work_folder_is_removed(tmp_path):
    made = leftovers.Leftovers(None)
    work = made.folder(tmp_path / "bench-e2e-x")
    (work / "checkpoint").mkdir(parents=True)
    assert made._folders() == [str(work)] and not work.exists()
    assert made._jobs() == [] and made._tables() == [] and made._topics() == []  # nothing recorded: no connection


@pytest.mark.parametrize("script", ["end_to_end.py", "chunk_cost.py", "parse_stages.py", "read_throughput.py"])
def test_scripts_reusing_a_topic_offer_keep_topic(script):
    done = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--keep-topic" in done.stdout and "skips producing" in " ".join(done.stdout.split())

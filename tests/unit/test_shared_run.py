"""What `make test`'s workers rely on (tests/shared_run.py): a group of tests stays on one worker, and a test that
breaks a service of the shared stack runs while no other integration test does."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.shared_run import merge, stack_use

pytestmark = pytest.mark.unit


def test_tests_of_one_xdist_group_in_two_files_run_on_one_worker(tmp_path):
    """pytest 9.2 silently dropped xdist_group under --dist loadgroup: the Airflow tests would then run side by
    side, each rewriting the DAGs the other triggers."""
    body = textwrap.dedent("""\
        import os, pytest
        pytestmark = pytest.mark.xdist_group("together")

        @pytest.mark.parametrize("n", range(3))
        def test_grouped(n, tmp_path_factory):
            (tmp_path_factory.getbasetemp().parent / f"{__name__}-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])
        """)
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(body)
    (tmp_path / "test_alone.py").write_text("def test_alone():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "run" / "base"), "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    assert done.returncode == 0, done.stdout[-2000:]
    workers = {p.name: p.read_text() for p in (tmp_path / "run" / "base").iterdir() if p.name.startswith("test_")}
    assert len(workers) == 6 and len(set(workers.values())) == 1, workers


def test_a_whole_stack_test_waits_for_the_shared_users_and_holds_off_new_ones(tmp_path):
    events: list[str] = []
    shared_in, whole_waiting = threading.Event(), threading.Event()

    def shared(name: str, hold: float, started: threading.Event | None = None):
        with stack_use(tmp_path, whole=False):
            events.append(f"{name} in")
            if started:
                started.set()
            time.sleep(hold)
            events.append(f"{name} out")

    def whole():
        whole_waiting.set()
        with stack_use(tmp_path, whole=True):
            events.append("whole in")
            time.sleep(0.2)
            events.append("whole out")

    first = threading.Thread(target=shared, args=("first", 0.5, shared_in))
    first.start()
    shared_in.wait(5)
    breaker = threading.Thread(target=whole)
    breaker.start()
    whole_waiting.wait(5)
    inode = (tmp_path / "stack.lock").stat().st_ino
    deadline = time.monotonic() + 10
    while not any("->" in line and line.split()[6].endswith(f":{inode}") for line in open("/proc/locks")):
        assert time.monotonic() < deadline, "the whole-stack test never queued for the lock"
        time.sleep(0.01)
    late = threading.Thread(target=shared, args=("late", 0.0))
    late.start()
    for t in (first, breaker, late):
        t.join(10)
    assert events == ["first in", "first out", "whole in", "whole out", "late in", "late out"]


def test_the_runs_state_merges_every_workers_report():
    run = merge([{"started": False, "since": 40, "issued": ["t_a"]}, {"started": True, "since": 12, "issued": ["t_b"]},
                 {"issued": []}])
    assert run == {"started": True, "since": 12, "issued": ["t_a", "t_b"]}

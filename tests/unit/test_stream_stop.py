"""How a stream stops: its grace, read as users write it, and the stop begun by SIGTERM or by its task's end."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from streamfill.durations import stop_grace_seconds
from streamfill.errors import OptionError
from streamfill.orchestration.spark_submit import retry_wait
from streamfill.spark_jobs.stream_stop import graceful_stop, watch_task

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw, seconds", [("60s", 60.0), ("2m", 120.0), ("90", 90.0), ("1500ms", 1.5)])
def test_a_stop_grace_is_a_duration_of_a_second_or_more(raw, seconds):
    assert stop_grace_seconds(raw) == seconds


@pytest.mark.parametrize("raw", ["0s", "500ms", "soon", ""])
def test_anything_shorter_or_else_is_refused_naming_the_flag(raw):
    with pytest.raises(OptionError, match=r"--stop-grace .* is not a stop grace; give a duration of at least 1s"):
        stop_grace_seconds(raw)


def test_a_retry_waits_for_the_grace_and_a_minute_at_least_two():
    assert retry_wait(60) == "120s" and retry_wait(300) == "360s"


def test_a_stop_sets_the_event_once_however_often_it_is_asked(capsys):
    stop = threading.Event()
    begin = graceful_stop(stop, 3600, "orders")
    begin("SIGTERM")
    begin("its Airflow task (pid 1) ended")
    assert stop.is_set()
    said = capsys.readouterr().out
    assert said.count("stopping after the batch in flight commits (within 3600 s)") == 1 and "SIGTERM" in said


def test_the_stream_stops_when_the_task_that_started_it_is_gone():
    task = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    stopped = threading.Event()
    watch_task(str(task.pid), lambda why: stopped.set(), every_s=0.1)
    assert not stopped.wait(0.2), "not while the task lives"
    task.wait()
    assert stopped.wait(5)


def test_past_the_grace_a_launch_from_a_shell_kills_itself_and_its_children_not_its_shells_other_jobs(tmp_path):
    """Without an Airflow task (STREAMFILL_STOP_WITH unset) the process group is the shell's: a sibling in it
    lives on."""
    import os
    import signal

    script = tmp_path / "launch.py"
    script.write_text("import subprocess, sys, time\n"
                      "from streamfill.spark_jobs.stream_stop import _end_launch\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                      "print(child.pid, flush=True)\n"
                      "_end_launch()\n")
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    env = {k: v for k, v in os.environ.items() if k != "STREAMFILL_STOP_WITH"}
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 137, done.stderr
        child = int(done.stdout.split()[0])
        for _ in range(50):
            if not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split(") ")[1][0] == "Z":
                break
            threading.Event().wait(0.1)
        else:
            raise AssertionError("the launch's child lives on")
        assert sibling.poll() is None, "a process beside the launch in its group was killed"
    finally:
        sibling.send_signal(signal.SIGKILL)
        sibling.wait()

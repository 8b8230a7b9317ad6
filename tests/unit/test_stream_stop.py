"""How a stream stops: its grace, read as users write it, and the stop begun by SIGTERM or by its task's end."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from streamfill.durations import stop_grace_seconds
from streamfill.errors import OptionError
from streamfill.orchestration.spark_submit import retry_wait
from streamfill.spark_jobs.stream_stop import StopGrace, watch_task

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
    begin = StopGrace(stop, 3600, "orders", cut=lambda: None)
    begin("SIGTERM")
    begin("its Airflow task (pid 1) ended")
    assert stop.is_set()
    said = capsys.readouterr().out
    assert said.count("stopping after the batch in flight commits (within 3600 s)") == 1 and "SIGTERM" in said


class Grace:
    """A stop grace whose timer runs out when the test says: `run_out()` is the grace's last instant; the cuts
    it made are counted."""

    def __init__(self) -> None:
        self.out, self.cuts = threading.Event(), []
        self.stop = threading.Event()
        self.grace = StopGrace(self.stop, 10, "orders", cut=lambda: self.cuts.append("cut"), wait=self._wait)

    def _wait(self, ended: threading.Event, seconds: float) -> bool:
        assert seconds == 10
        while not ended.is_set() and not self.out.is_set():
            ended.wait(0.01)
        return ended.is_set() and not self.out.is_set()

    def run_out(self) -> None:
        self.out.set()
        self.grace.timer.join(10)
        assert not self.grace.timer.is_alive()


def test_a_query_stopped_well_within_the_grace_ends_the_timer_and_nothing_is_cut():
    g = Grace()
    g.grace("SIGTERM")
    assert g.stop.is_set() and g.grace.ended()
    g.grace.timer.join(10)
    assert not g.grace.timer.is_alive() and g.cuts == [], "the timer ended with the stop"


def test_a_query_stopped_at_the_last_instant_of_the_grace_is_not_cut_while_the_launch_shuts_down():
    g = Grace()
    g.grace("SIGTERM")
    assert g.grace.ended()  # the batch in flight committed at 9.5 s of 10
    g.run_out()
    assert g.cuts == []


def test_past_the_grace_a_query_still_running_is_cut_once_and_a_late_stop_says_so(capsys):
    g = Grace()
    g.grace("SIGTERM")
    g.grace("its Airflow task (pid 1) ended")
    g.run_out()
    assert g.cuts == ["cut"] and not g.grace.ended(), "too late: the cut is under way"
    assert "the batch in flight did not commit within 10 s of the stop" in capsys.readouterr().out


def test_a_stop_asked_once_the_query_has_stopped_starts_no_timer():
    g = Grace()
    assert g.grace.ended()  # the query ended on its own (available-now), the launch shuts down
    g.grace("SIGTERM")
    assert g.stop.is_set() and g.grace.timer is None and g.cuts == []


def test_the_real_timer_waits_for_the_stop_not_for_the_grace():
    cuts: list[str] = []
    grace = StopGrace(threading.Event(), 3600, "orders", cut=lambda: cuts.append("cut"))
    grace("SIGTERM")
    assert grace.ended()
    grace.timer.join(10)
    assert not grace.timer.is_alive() and cuts == [], "an hour's grace ends with the stop, not after the hour"


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

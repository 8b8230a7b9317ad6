"""The stack's processes and logs, on real processes and files: a pid file is believed only while /proc shows
the process it recorded (never signalling what a reused pid names now), and logs stay bounded."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from streamfill.cli import stack
from streamfill.cli.stack.kafka import LOG4J, Kafka
from streamfill.cli.stack.logrotate import prune, rotate
from streamfill.cli.stack.pidfile import argv_matches, cmdline, live_pid, read_pid, read_record, write_record
from streamfill.cli.stack.process import spawn
from streamfill.settings import Settings

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def sleeper():
    """A process in a session of its own, like the ones the stack starts, killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(*argv: str) -> subprocess.Popen:
        proc = subprocess.Popen(list(argv or ("sleep", "300")), start_new_session=True)
        procs.append(proc)
        deadline = time.monotonic() + 10
        while not cmdline(proc.pid) and time.monotonic() < deadline:  # exec'd: /proc shows its command line
            time.sleep(0.01)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_pid_file_counts_while_its_process_runs_and_is_removed_once_it_is_gone(tmp_path):
    pid_file = tmp_path / "svc.pid"
    pid = spawn(["sleep", "300"], log=tmp_path / "svc.log", pid_file=pid_file)
    assert read_record(pid_file).argv == ("sleep", "300")
    assert live_pid(pid_file) == pid
    assert _mode(tmp_path / "svc.log") == 0o600
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert live_pid(pid_file) is None
    assert not pid_file.exists()


def test_a_reused_pid_is_never_believed_nor_signalled(tmp_path, sleeper):
    """After pid reuse the file's number names an unrelated process: stack down must leave it alone."""
    settings = Settings(home=tmp_path)
    unrelated = sleeper()
    kafka = Kafka(settings)
    write_record(kafka.pid_file, unrelated.pid, kafka.command())  # the command the stack had started
    record = read_record(kafka.pid_file)
    assert record.pid == unrelated.pid and record.start is not None
    said: list[str] = []
    stack.down(settings, say=said.append)
    assert said == ["stack is not running: nothing to stop"]
    assert unrelated.poll() is None, "the unrelated process must not be signalled"
    assert not kafka.pid_file.exists(), "a stale pid file is removed"


def test_the_same_command_started_later_is_another_process(tmp_path, sleeper):
    proc = sleeper()
    pid_file = tmp_path / "svc.pid"
    write_record(pid_file, proc.pid, ["sleep", "300"])
    assert live_pid(pid_file) == proc.pid
    text = pid_file.read_text().replace('"start": ', '"start": 1')  # recorded start time no longer matches
    pid_file.write_text(text)
    assert live_pid(pid_file) is None and not pid_file.exists()


def test_an_older_stacks_pid_file_is_recognised_by_the_services_command_line(tmp_path, sleeper):
    """Older stacks wrote the number alone: the process counts when its command line is the service's."""
    settings = Settings(home=tmp_path)
    kafka = Kafka(settings)
    kafka.pid_file.parent.mkdir(parents=True)
    ours = sleeper("sh", "-c", "sleep 300", "kafka.Kafka", str(kafka.root / "server.properties"))
    kafka.pid_file.write_text(str(ours.pid))
    assert kafka.running() and kafka.pid() == ours.pid and read_pid(kafka.pid_file) == ours.pid
    other_home = sleeper("sh", "-c", "sleep 300", "kafka.Kafka", "/elsewhere/kafka/server.properties")
    kafka.pid_file.write_text(str(other_home.pid))
    assert not kafka.running() and not kafka.pid_file.exists()
    assert other_home.poll() is None


def test_a_scripts_interpreter_in_front_of_the_command_line_still_matches():
    argv = ["/venv/bin/airflow", "standalone"]
    assert argv_matches(["/venv/bin/python3.11", "/venv/bin/airflow", "standalone"], argv)
    assert argv_matches(argv, argv)
    assert not argv_matches(["/venv/bin/python3.11", "/venv/bin/airflow", "scheduler"], argv)
    assert not argv_matches(["standalone"], argv)
    assert not argv_matches(["anything"], [])


def test_rotate_keeps_three_older_generations_and_leaves_small_logs_alone(tmp_path):
    log = tmp_path / "svc.log"
    log.write_text("small")
    assert not rotate(log, max_bytes=10)
    for n in range(5):
        log.write_text(f"run {n} " + "x" * 20)
        assert rotate(log, max_bytes=10, keep=3)
    assert not log.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["svc.log.1", "svc.log.2", "svc.log.3"]
    assert [(tmp_path / f"svc.log.{n}").read_text()[:5] for n in (1, 2, 3)] == ["run 4", "run 3", "run 2"]
    assert not rotate(tmp_path / "missing.log", max_bytes=0)


def test_prune_keeps_the_newest_files(tmp_path):
    for n in range(6):
        f = tmp_path / f"postgresql-{n}.log"
        f.write_text(str(n))
        os.utime(f, (time.time() - 100 + n, time.time() - 100 + n))
    (tmp_path / "other.txt").write_text("kept")
    removed = prune(tmp_path, "postgresql-*.log", 4)
    assert sorted(p.name for p in removed) == ["postgresql-0.log", "postgresql-1.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.txt", "postgresql-2.log", "postgresql-3.log", "postgresql-4.log", "postgresql-5.log"]


def test_kafka_rolls_its_log_and_logs_warnings_by_default():
    config = yaml.safe_load(LOG4J.read_text())["Configuration"]
    rolling = config["Appenders"]["RollingFile"]
    assert rolling["Policies"]["SizeBasedTriggeringPolicy"]["size"] == "10 MB"
    assert rolling["DefaultRolloverStrategy"]["max"] == 3
    assert config["Loggers"]["Root"]["level"] == "WARN"

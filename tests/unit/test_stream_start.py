"""Where a new stream starts: an entry's `start:` or `--start`, as the source option that reads from there."""

from __future__ import annotations

import pytest

from streamfill.connectors.kafka.offsets import (
    Earliest,
    GlobalTimestamp,
    GroupOffsets,
    Latest,
    parse_start,
    start_option,
)
from streamfill.errors import OptionError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw, spec, option", [
    ("earliest", Earliest(), ("startingOffsets", "earliest")),
    (" LATEST ", Latest(), ("startingOffsets", "latest")),
    ("2026-01-01T00:00:00Z", GlobalTimestamp(1767225600000), ("startingTimestamp", "1767225600000")),
    ("2026-01-01T01:00:00+01:00", GlobalTimestamp(1767225600000), ("startingTimestamp", "1767225600000")),
    ("group:connect-jdbc-sink", GroupOffsets("connect-jdbc-sink"), ("startingGroup", "connect-jdbc-sink")),
    (" Group: connect-Orders.v2 ", GroupOffsets("connect-Orders.v2"), ("startingGroup", "connect-Orders.v2")),
])
def test_a_start_is_earliest_latest_a_time_or_a_group_and_becomes_the_sources_option(raw, spec, option):
    assert parse_start(raw, "--start") == spec
    assert start_option(spec) == option


@pytest.mark.parametrize("raw, problem", [
    ("yesterday", "is not a start"),
    ('{"orders": {"0": 5}}', "is not a start of a whole stream"),
    ("2999-01-01T00:00:00Z", "is in the future"),
    ("group:", "names no consumer group"),
    ("group:  ", "names no consumer group"),
])
def test_anything_else_is_refused_naming_the_value_and_the_three_forms(raw, problem):
    with pytest.raises(OptionError) as err:
        parse_start(raw, "--start")
    assert err.value.option == "--start" and err.value.value == raw and problem in str(err.value)
    assert "earliest" in err.value.fix or "group:NAME" in err.value.fix


def test_the_flag_wins_over_the_entry_and_the_entry_over_earliest(tmp_path, monkeypatch):
    from streamfill.spark_jobs.stream_args import StreamArgs

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  fresh:\n    topic: t\n    table: t\n    start: latest\n    columns: {a: {type: int}}\n"
                    "  old:\n    topic: t\n    table: t\n    columns: {a: {type: int}}\n")
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    assert StreamArgs.from_flags(job="fresh").start_option == ("startingOffsets", "latest")
    assert StreamArgs.from_flags(job="old").start_option == ("startingOffsets", "earliest")
    assert StreamArgs.from_flags(job="fresh", start="2026-01-01T00:00:00Z").start_option == (
        "startingTimestamp", "1767225600000")
    with pytest.raises(OptionError, match="--start 'soon' is not a start"):
        StreamArgs.from_flags(job="old", start="soon")
    assert StreamArgs.from_flags(job="old", start="group:connect-old").start_option == ("startingGroup",
                                                                                         "connect-old")


def test_the_checkpoint_lives_under_the_entrys_checkpoint_dir_and_a_url_stays_a_url(tmp_path, monkeypatch):
    from pathlib import Path

    from streamfill.spark_jobs.stream_args import StreamArgs

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  shared:\n    topic: t\n    table: t\n    checkpoint_dir: s3a://etl/checkpoints/\n"
                    "    columns: {a: {type: int}}\n  local:\n    topic: t\n    table: t\n"
                    f"    checkpoint_dir: {tmp_path}/ck\n    columns: {{a: {{type: int}}}}\n")
    monkeypatch.setenv("STREAMFILL_JOBS_FILE", str(jobs))
    assert StreamArgs.from_flags(job="shared").checkpoint == "s3a://etl/checkpoints/shared"
    assert StreamArgs.from_flags(job="local").checkpoint == Path(f"{tmp_path}/ck/local")
    assert StreamArgs.from_flags(job="shared", checkpoint="/var/ck").checkpoint == Path("/var/ck")

"""The streamfill page's pure parts: windows, buckets, ages, counts and raw bytes shown safely."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from streamfill.orchestration.ui import format as fmt

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("raw, want", [(None, ("1h", timedelta(hours=1))), ("24h", ("24h", timedelta(hours=24))),
                                       (" 7D ", ("7d", timedelta(days=7)))])
def test_a_window_is_one_of_three(raw, want):
    assert fmt.parse_window(raw) == want


def test_another_window_is_refused_with_the_choices():
    with pytest.raises(fmt.WindowError, match=r"window '30d' .* use one of 1h, 24h, 7d"):
        fmt.parse_window("30d")


def test_a_window_is_drawn_per_batch_until_it_has_too_many():
    assert fmt.bucket_for(timedelta(hours=1), 1000) is None
    assert fmt.bucket_for(timedelta(days=7), 100_000) == timedelta(seconds=605)  # 604,800 s / 1,000, rounded up
    assert fmt.bucket_for(timedelta(seconds=10), 5000, max_points=2000) == timedelta(seconds=1)


@pytest.mark.parametrize("ago, want", [(None, "never"), (timedelta(seconds=42), "42 s"),
                                       (timedelta(minutes=5), "5 min"), (timedelta(hours=3, minutes=20), "3 h 20 min"),
                                       (timedelta(hours=2), "2 h"), (timedelta(days=2, hours=4), "2 d 4 h"),
                                       (-timedelta(seconds=3), "0 s")])
def test_ages_read_like_a_person_says_them(ago, want):
    assert fmt.age(None if ago is None else NOW - ago, NOW) == want


def test_counts_and_rates():
    assert fmt.count(None) == "-" and fmt.count(1234567) == "1,234,567" and fmt.count(2.6) == "3"
    assert fmt.per_second(100, 4.0) == 25.0
    assert fmt.per_second(None, 1) is None and fmt.per_second(5, 0) is None and fmt.per_second(5, None) is None


def test_raw_bytes_are_shown_as_text_with_escapes_and_as_hex_and_cut():
    shown = fmt.safe_bytes(b'{"a": 1}\x00\xff<script>\n')
    assert shown["text"] == '{"a": 1}\\x00\\xff<script>\\x0a'  # the template escapes < and > on top
    assert shown["hex"].startswith("7b 22 61") and not shown["truncated"]
    long = fmt.safe_bytes(b"x" * 300, limit=200)
    assert long["text"] == "x" * 200 and long["truncated"] and len(long["hex"].split()) == 200
    assert fmt.safe_bytes(memoryview(b"ok"))["text"] == "ok"
    assert fmt.safe_bytes(None) == {"text": "(no value)", "hex": "", "truncated": False}


def test_lag_now_is_the_log_end_now_for_a_stream_and_what_is_left_of_its_range_for_a_backfill():
    from streamfill.orchestration.ui.format import lag_now, window_of

    positions = {("t", 0): 100, ("t", 1): 40}
    assert lag_now(positions, {("t", 0): 130, ("t", 1): 40}) == (30, 30)
    assert lag_now(positions, {("t", 0): 90, ("t", 1): 45}) == (5, 5)  # never negative
    assert lag_now(positions, None) is None  # the broker did not answer
    assert lag_now({}, {}) is None
    window = window_of({"backfill": {"window": {"t:0": [0, 100], "t:1": [0, 50], "t:2": [10, 20]}}})
    assert window == {("t", 0): (0, 100), ("t", 1): (0, 50), ("t", 2): (10, 20)}
    # a finished partition, one with 10 left, one not started: the log beyond the range does not count
    assert lag_now(positions, {("t", 0): 500}, window) == (20, 10)
    assert window_of({"stream": {}}) is None and window_of(None) is None

"""What an asset event claims about committed data: consecutive announcements cover the commits without gap or
overlap, and the check that compares them names every difference."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from streamfill.errors import ProtocolError
from streamfill.offsets_db.announce_plan import (
    COMMITS,
    Commit,
    asset_cover_problems,
    commits_key,
    cover_problems,
    covering,
    from_extra,
    segments,
    to_extra,
)

pytestmark = pytest.mark.unit
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)


def _commits(n: int, parts: int = 2, per: int = 10) -> list[Commit]:
    return [Commit(i, i + 100, T0 + timedelta(seconds=i), per * parts - 1, 1,
                   tuple(("t", p, (i - 1) * per, i * per) for p in range(parts))) for i in range(1, n + 1)]


def test_any_split_of_the_commits_into_announcements_covers_them_exactly_and_a_change_is_named():
    commits = _commits(40)
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, 40), rng.randint(0, 10)))
        bounds = list(zip([0, *cuts], [*cuts, 40]))
        bodies = [from_extra(to_extra(COMMITS, "j", covering(commits[a:b], a), announcement=k))
                  for k, (a, b) in enumerate(bounds, 1)]
        assert cover_problems(commits, bodies) == []
        assert sum(b["rows"] for b in bodies) == sum(c.rows for c in commits)
        assert all(b["offsets"]["t"]["0"] == [[a * 10, bb * 10]] for b, (a, bb) in zip(bodies, bounds))
    whole = from_extra(to_extra(COMMITS, "j", covering(commits, 0)))
    half = from_extra(to_extra(COMMITS, "j", covering(commits[:20], 0)))
    assert cover_problems(commits, [whole, whole]) == [f"commit {n} announced 2 times" for n in range(1, 41)]
    assert cover_problems(commits, [half]) == [f"commit {n} (batch {n + 100}) never announced" for n in range(21, 41)]


def test_an_announcement_refuses_commits_out_of_order_or_with_a_gap():
    commits = _commits(5)
    with pytest.raises(ProtocolError, match=r"after 1 in order without a gap; got \[3, 4, 5\]"):
        covering(commits[2:], 1)
    with pytest.raises(ProtocolError, match="got \\[\\]"):
        covering([], 0)


def test_offsets_lost_between_commits_stay_a_gap_and_an_event_of_another_tool_is_not_ours():
    assert segments([("t", 0, 0, 10), ("t", 0, 10, 20), ("t", 0, 25, 30), ("t", 1, 5, 5)]) == {
        "t": {"0": [[0, 20], [25, 30]]}}
    assert from_extra({"from_rest_api": True}) is None
    assert from_extra({"streamfill": {"kind": "other"}}) is None


def test_jobs_announcing_on_one_table_each_cover_their_commits_under_keys_of_their_own():
    commits = {"orders_eu": _commits(12), "orders_us": _commits(7)}
    rng = random.Random(11)
    events = []
    for job, done in commits.items():
        cuts = sorted(rng.sample(range(1, len(done)), 3))
        for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(done)]), 1):
            events.append((commits_key(job, k), from_extra(to_extra(COMMITS, job, covering(done[a:b], a),
                                                                    announcement=k))))
    rng.shuffle(events)  # both jobs' events interleave on the asset
    assert asset_cover_problems(commits, events) == []
    assert len({key for key, _ in events}) == len(events) == 8

    # keyed by the number alone, both jobs' first announcements share a key; one job's announcement missing
    # leaves its commits unannounced, whatever the other job announced
    numbered = [(f"{COMMITS}:{body['announcement']}", body) for _, body in events]
    assert f"partition key '{COMMITS}:1' given 2 times" in asset_cover_problems(commits, numbered)
    assert "announcement 1 of job orders_eu is keyed 'commits:1', not 'commits:orders_eu:1'" in \
        asset_cover_problems(commits, numbered)
    only_us = [(key, body) for key, body in events if body["job"] == "orders_us"]
    assert asset_cover_problems(commits, only_us) == [f"job orders_eu: commit {n} (batch {n + 100}) never announced"
                                                      for n in range(1, 13)]

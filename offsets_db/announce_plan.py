"""What an asset event says about committed data, as pure values: the commits it covers, their rows, dead
letters and offsets per partition, and the one shape of its extra (`to_extra` / `from_extra`), which a
downstream DAG reads. No I/O here (offsets_db/announcements.py reads and records).

A stream's announcement covers the commits after the previous one's last, without gap: `covering` refuses
anything else, and `cover_problems` names every gap, overlap or repeat between what was committed and what was
announced (the tests' and the demo's check); `asset_cover_problems` does so for every job announcing on one
table's asset, and names a partition key that is not its announcement's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streamfill.errors import ProtocolError

EXTRA_KEY = "streamfill"  # the extra's one key: Airflow adds keys of its own beside it (from_rest_api, say)
WINDOW, COMMITS = "window", "commits"  # the two kinds of event
WINDOW_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"  # a window's partition key: its start, as Airflow formats partition dates

Range = tuple[str, int, int, int]  # topic, partition, start offset, end offset (exclusive)


@dataclass(frozen=True)
class Commit:
    """One committed batch of a job, by its commit number."""

    number: int
    batch_seq: int
    committed_at: datetime
    rows: int
    dead_letters: int
    ranges: tuple[Range, ...]


@dataclass(frozen=True)
class Covered:
    """What consecutive commits hold together."""

    first_commit: int
    last_commit: int
    first_batch: int
    last_batch: int
    rows: int
    dead_letters: int
    offsets: dict[str, dict[str, list[list[int]]]]  # topic -> partition -> [[start, end), ...], merged
    first_committed_at: datetime
    last_committed_at: datetime


def commits_key(job: str, announcement: int) -> str:
    """The partition key of a job's announcement number `announcement`. It names the job: the jobs writing one
    table announce on its one asset, each numbering its announcements from 1 (a job name has no colon)."""
    return f"{COMMITS}:{job}:{announcement}"


def segments(ranges: Iterable[Range]) -> dict[str, dict[str, list[list[int]]]]:
    """Ranges per topic and partition, adjacent ones merged; a gap (data loss, offsets never committed) stays a
    gap, so an event never claims offsets no commit holds. JSON-ready: partitions are strings."""
    out: dict[str, dict[str, list[list[int]]]] = {}
    for topic, partition, start, end in sorted(ranges):
        if end <= start:
            continue
        spans = out.setdefault(topic, {}).setdefault(str(partition), [])
        if spans and spans[-1][1] >= start:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return out


def covering(commits: Sequence[Commit], after: int) -> Covered:
    """The commits after commit number `after`, which must be `after + 1`, `after + 2`, ... without a gap."""
    numbers = [c.number for c in commits]
    if not commits or numbers != list(range(after + 1, after + 1 + len(commits))):
        raise ProtocolError(f"an announcement covers the commits after {after} in order without a gap; got "
                            f"{numbers[:10]}{'...' if len(numbers) > 10 else ''}")
    return Covered(commits[0].number, commits[-1].number, min(c.batch_seq for c in commits),
                   max(c.batch_seq for c in commits), sum(c.rows for c in commits),
                   sum(c.dead_letters for c in commits), segments(r for c in commits for r in c.ranges),
                   min(c.committed_at for c in commits), max(c.committed_at for c in commits))


def to_extra(kind: str, job: str, covered: Covered | None, **more: Any) -> dict[str, Any]:
    """The asset event's extra: `{"streamfill": {...}}`. `covered` None: nothing was committed (a window without
    records still landed, with nothing in it)."""
    if covered is None:
        body = {"kind": kind, "job": job, "commits": None, "batches": None, "rows": 0, "dead_letters": 0,
                "offsets": {}, "committed": None}
    else:
        body = {"kind": kind, "job": job, "commits": [covered.first_commit, covered.last_commit],
                "batches": [covered.first_batch, covered.last_batch], "rows": covered.rows,
                "dead_letters": covered.dead_letters, "offsets": covered.offsets,
                "committed": [covered.first_committed_at.isoformat(), covered.last_committed_at.isoformat()]}
    return {EXTRA_KEY: {**body, **more}}


def from_extra(extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The streamfill part of an asset event's extra; None for an event streamfill did not emit."""
    body = (extra or {}).get(EXTRA_KEY)
    return dict(body) if isinstance(body, Mapping) and body.get("kind") in (WINDOW, COMMITS) else None


def cover_problems(committed: Sequence[Commit], announced: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every difference between commits and the announcements (extras' streamfill parts) of one job: a commit
    announced twice or never, or offsets an announcement claims that its commits do not hold."""
    by_number = {c.number: c for c in committed}
    seen: dict[int, int] = {}
    problems = []
    for body in announced:
        first, last = body["commits"]
        for n in range(first, last + 1):
            seen[n] = seen.get(n, 0) + 1
        held = segments(r for n in range(first, last + 1) if n in by_number for r in by_number[n].ranges)
        if held != body["offsets"]:
            problems.append(f"the announcement of commits {first}-{last} claims offsets {body['offsets']}, its "
                            f"commits hold {held}")
    problems += [f"commit {n} announced {k} times" for n, k in sorted(seen.items()) if k > 1]
    problems += [f"commit {n} (batch {by_number[n].batch_seq}) never announced" for n in sorted(by_number)
                 if n not in seen]
    problems += [f"commit {n} announced but never committed" for n in sorted(seen) if n not in by_number]
    return problems


def asset_cover_problems(committed: Mapping[str, Sequence[Commit]],
                         events: Iterable[tuple[str | None, Mapping[str, Any]]]) -> list[str]:
    """Every difference between the commits of the jobs writing one table (by job) and the announcements on the
    table's asset, as (partition key, extra's streamfill part) of each event: per job, what `cover_problems`
    names; an event keyed other than `commits_key` of its job and number, a key given twice, or an announcement
    of a job not among `committed`."""
    by_job: dict[str, list[Mapping[str, Any]]] = {job: [] for job in committed}
    keys: dict[str, int] = {}
    problems = []
    for key, body in events:
        if body.get("kind") != COMMITS:
            continue
        job = body["job"]
        if job not in by_job:
            problems.append(f"announcement {body.get('announcement')} of job {job}, which is not among "
                            f"{sorted(committed)}")
            continue
        by_job[job].append(body)
        want = commits_key(job, body["announcement"])
        if key != want:
            problems.append(f"announcement {body['announcement']} of job {job} is keyed {key!r}, not {want!r}")
        keys[key] = keys.get(key, 0) + 1
    problems += [f"partition key {key!r} given {n} times" for key, n in keys.items() if n > 1]
    for job, bodies in by_job.items():
        problems += [f"job {job}: {p}" for p in cover_problems(committed[job], bodies)]
    return problems

"""A stream's commits announced to Airflow as asset events: killed between any two steps of a delivery, the
announcer neither loses nor repeats an announcement, and the events Airflow stored cover the committed offsets
without gap or overlap."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error

import pytest

from offsets_db import announcements
from offsets_db.announce_plan import cover_problems, from_extra
from offsets_db.exactly_once import PlannedRange
from offsets_db.store import OffsetStore
from orchestration.airflow_api import AirflowApi
from streamfill import REPO_ROOT
from streamfill.datasets import PgTable
from tests.shared_run import AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]


def _commit(store: OffsetStore, job: str, n: int) -> None:
    """n more commits of 10 offsets on each of two partitions."""
    for _ in range(n):
        at = store.snapshot(job)
        ranges = [PlannedRange("events", p, at.get(("events", p), 0), at.get(("events", p), 0) + 10)
                  for p in (0, 1)]
        store.commit(job, store.record_planned(job, ranges), rows_written=19, dead_letters=1)


def _announcer(job: str, uri: str, tmp, point: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMFILL_FAILPOINT_DIR": str(tmp / (point or "clean"))}
    if point:
        env |= {"STREAMFILL_FAILPOINT": point, "STREAMFILL_FAILPOINT_ACTION": "kill"}
    return subprocess.run([sys.executable, "-m", "tests.integration.announce_driver", job, uri, "1"], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)


@pytest.mark.fault
def test_an_announcer_killed_before_and_after_it_posts_announces_every_commit_once(stack_settings, topic_name,
                                                                                    tmp_path):
    job = topic_name
    uri = PgTable.of(stack_settings.offsets_db_url, f"{topic_name}_events").asset_uri
    dag_file = REPO_ROOT / "dags" / f"{topic_name}_asset.py"  # declares the asset, paused: no watcher of its own
    dag_file.write_text("from airflow.sdk import DAG, Asset\n"
                        f"with DAG('streamfill_announce__{job}', schedule=[Asset(name={uri!r}, uri={uri!r})], "
                        "is_paused_upon_creation=True):\n    pass\n")
    api = AirflowApi(stack_settings)
    try:
        deadline = time.monotonic() + 240
        while (asset := api.asset_id(uri)) is None:  # the DAG processor's next folder scan
            assert time.monotonic() < deadline, f"Airflow never listed the asset {uri}"
            time.sleep(2)
        store = OffsetStore(stack_settings.offsets_db_url)
        store.ensure_job(job, "stream")
        _commit(store, job, 5)
        killed = [_announcer(job, uri, tmp_path, point) for point in ("announce.attempting", "announce.posted")]
        assert [k.returncode for k in killed] == [-9, -9], [k.stderr[-2000:] for k in killed]
        _commit(store, job, 3)
        done = _announcer(job, uri, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "found in Airflow after an interrupted delivery" in done.stderr, done.stderr[-3000:]

        events = [e for e in api.asset_events(asset) if from_extra(e["extra"])]
        bodies = [from_extra(e["extra"]) for e in events]
        committed = announcements.commits(store.engine, job)
        assert len(committed) == 8
        assert cover_problems(committed, bodies) == []
        assert [e["partition_key"] for e in events] == [f"commits:{b['announcement']}" for b in bodies]
        assert len({b["uuid"] for b in bodies}) == len(events) == len(announcements.announced(store.engine, job)) >= 2
        assert sum(b["rows"] for b in bodies) == 8 * 19 and sum(b["dead_letters"] for b in bodies) == 8
    finally:
        dag_file.unlink(missing_ok=True)
        try:
            api.call("DELETE", f"/api/v2/dags/streamfill_announce__{job}")
        except urllib.error.HTTPError:
            pass

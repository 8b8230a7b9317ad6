"""How many tasks read a stream's micro-batch: one per core on a local master, one per partition on a cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streamfill.spark_jobs.stream_query import packing

pytestmark = pytest.mark.unit


def session(master: str, cores: int) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master, defaultParallelism=cores))


def test_a_local_master_packs_a_batch_into_a_task_per_core():
    assert packing(session("local[*]", 2)) == {"maxPartitions": "2"}


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:443"])
def test_a_cluster_keeps_a_task_per_partition(master):
    assert packing(session(master, 2)) == {}

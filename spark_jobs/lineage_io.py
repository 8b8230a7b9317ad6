"""What a launch reads and writes, as the datasets of its OpenLineage events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streamfill.spark_jobs.pipelines import PipelineSpec


@dataclass(frozen=True)
class LineageIO:
    """What a launch reads and writes, for its OpenLineage events (streamfill.datasets names or built datasets)."""

    inputs: tuple = ()
    outputs: tuple = ()
    processing: str = "BATCH"  # or STREAMING


def lineage_io(spec: PipelineSpec, topics: list[str], kafka: Mapping[str, str], url: str, table: str,
               processing: str = "BATCH") -> LineageIO:
    """The topics an entry's launch reads (a pattern stands for the topics it matches) and the table it writes
    with the columns the entry gives it."""
    from streamfill.datasets import KafkaTopic, PgTable
    from streamfill.spark_jobs.lineage_events import output_dataset, schema_facet

    servers = kafka.get("bootstrap.servers", "")
    return LineageIO(tuple(KafkaTopic.of(servers, t) for t in topics),
                     (output_dataset(PgTable.of(url, table), schema=schema_facet(spec)),), processing)

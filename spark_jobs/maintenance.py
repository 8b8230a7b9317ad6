"""Keeping offsets_db and the staging tables bounded: one prune at the configured ages, for `streamfill db prune`
and the maintenance DAG alike (docs/operations.md#retention)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streamfill.offsets_db.retention import Removed
from streamfill.retention_ages import Retention

STAGES_WHAT = "staging tables no running launch uses"


@dataclass(frozen=True)
class Pruned:
    applied: bool
    retention: Retention
    removed: tuple[Removed, ...]

    def lines(self) -> list[str]:
        head = ("removed" if self.applied else "a dry run, nothing removed; --apply removes") + \
            f" what is older than its age ({self.retention.describe()}):"
        body = [f"  {r.kind:<16} {r.rows:>10,}  {r.what}" for r in self.removed]
        return [head, *body] if body else [head, "  nothing"]


def prune(url: str, retention: Retention, *, apply: bool, jobs: Sequence[str] | None = None,
          progress: Callable[[str], None] = print, kafka: Mapping[str, str] | None = None) -> Pruned:
    """Prune offsets_db at `retention`'s ages, then drop the staging tables no running launch uses (or, with
    apply False, say what would go); of every job, or of the jobs named. `kafka` (a client's librdkafka settings)
    is asked which records of deleted keys it still holds; without it deleted keys are kept."""
    from streamfill.connectors.postgres import stage
    from streamfill.offsets_db import retention as history
    from streamfill.offsets_db import revision
    from streamfill.offsets_db.engine import make_engine

    engine = make_engine(url)
    try:
        revision.require(engine)
        broker = None
        if kafka is not None and retention.deleted_keys is not None:
            from streamfill.connectors.kafka.broker import Broker

            broker = Broker(kafka)
        removed = history.prune(engine, retention, apply=apply, jobs=jobs, progress=progress, kafka=broker)
        if retention.stages is not None:
            raw = engine.raw_connection()
            try:
                with raw.cursor() as cur:
                    unused = [found for found in stage.unused_stream_stages(cur, retention.stages.total_seconds())
                              if jobs is None or found[2]["job"] in jobs]
                    dropped = 0
                    for schema, name, about in unused:
                        if not apply:
                            progress(f"would drop {schema}.{name}, the stage of job {about['job']} into "
                                     f"{about.get('target')}")
                        elif stage.drop_unused(cur, schema, name):
                            dropped += 1
                            progress(f"dropped {schema}.{name}, the stage of job {about['job']} into "
                                     f"{about.get('target')}")
                raw.commit()
            finally:
                raw.close()
            removed.append(Removed("stages", STAGES_WHAT, dropped if apply else len(unused)))
    finally:
        engine.dispose()
    return Pruned(apply, retention, tuple(removed))

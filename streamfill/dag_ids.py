"""The DAG ids streamfill gives each pipeline entry, in one place: the DAG factory names its DAGs with them,
`streamfill jobs list` shows them (without Airflow installed too, hence here and not on the Airflow side), and the
streamfill page asks Airflow's auth manager about them."""

from __future__ import annotations

REPLAY = "streamfill_replay"  # one form for every entry with one topic
MAINTENANCE = "streamfill_maintenance"  # prunes offsets_db's history at its ages, for every entry


def stream(job: str) -> str:
    return f"streamfill_stream__{job}"


def stream_health(job: str) -> str:
    return f"streamfill_stream_health__{job}"


def interval(job: str) -> str:
    return f"streamfill_interval__{job}"


def quality(job: str) -> str:
    return f"streamfill_quality__{job}"


def announce(job: str) -> str:
    return f"streamfill_announce__{job}"


def of_entry(job: str, one_topic: bool) -> list[str]:
    """The DAGs made for the entry `job` alone (windows need one topic); the shared replay form is not one."""
    return [stream(job), stream_health(job), *([interval(job)] if one_topic else []), quality(job), announce(job)]

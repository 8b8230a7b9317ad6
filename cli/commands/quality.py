"""`streamfill quality --job NAME [--table T]`: an entry's Great Expectations suite on its table, now."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from streamfill import extras
from streamfill.console import EXIT_CODES, console, refusals
from streamfill.settings import get_settings


def quality(
    job: Annotated[str, typer.Option("--job", help="the entry (and offsets_db job) whose table to check")],
    table: Annotated[str | None, typer.Option(
        "--table", help="the table (default: the entry's; a routed entry's: each of its tables)")] = None,
    pipeline: Annotated[str | None, typer.Option(
        "--pipeline", help="the entry whose rules apply (default: --job's)")] = None,
    fresh_minutes: Annotated[int | None, typer.Option(
        "--fresh-minutes", min=1, help="also check the newest record is at most this old")] = None,
) -> None:
    """Run the suite: one PASS or FAIL line per expectation, stored in quality_results; exit 1 on a failure."""
    with refusals():
        extras.require(extras.QUALITY, "`streamfill quality`")
    from streamfill.errors import FAILED, QualityFailed
    from streamfill.offsets_db import queries
    from streamfill.offsets_db.engine import make_engine, reaching
    from streamfill.spark_jobs import pipelines
    from streamfill.spark_jobs import quality as q

    url = get_settings().offsets_db_url
    with refusals(), reaching(url):
        try:
            spec = pipelines.entry(pipeline or job, "--pipeline" if pipeline else "--job")
            engine = make_engine(url)
            try:
                queries.rows(engine, "latest", job, limit=1)  # an unknown job fails, naming the known ones
            finally:
                engine.dispose()
            outcome = q.validate(url, table, job, pipeline=spec.name, whole_table=True,
                                 freshness=timedelta(minutes=fresh_minutes) if fresh_minutes else None)
            q.require(outcome)
        except QualityFailed:  # require() printed each failing expectation already
            raise typer.Exit(EXIT_CODES[FAILED]) from None
    console.print("all expectations met", highlight=False)

"""`streamfill db upgrade`: offsets_db's migrations; `streamfill db grants`: the roles a DBA creates for it;
`streamfill db prune`: its history kept bounded."""

from __future__ import annotations

import typer

from streamfill.console import console
from streamfill.settings import get_settings

app = typer.Typer(no_args_is_help=True, help="offsets_db in PostgreSQL.")


@app.command("upgrade")
def upgrade(revision: str = typer.Argument("head", help="Alembic revision to upgrade to"),
            while_running: bool = typer.Option(
                False, "--while-running",
                help="migrate even while streams hold their jobs (docs/upgrading.md says which upgrades allow it)"),
            ) -> None:
    """Apply offsets_db migrations to STREAMFILL_DB_URL (the local stack's database by default). Refused while a
    stream holds its job: stop the streams first (docs/upgrading.md)."""
    from streamfill.console import refusals
    from streamfill.errors import JobBusy
    from streamfill.offsets_db.engine import make_engine, reaching
    from streamfill.offsets_db.fencing import streams_holding
    from streamfill.offsets_db.migrate import upgrade as migrate
    from streamfill.urls import without_password

    url = get_settings().offsets_db_url
    with refusals(), reaching(url):
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                running = streams_holding(conn)
        finally:
            engine.dispose()
        if running and not while_running:
            raise JobBusy(
                f"{len(running)} stream(s) hold their jobs in offsets_db at {without_password(url)}: "
                + "; ".join(running) + ". Stop them first (their stream DAGs' tasks, or the `streamfill stream` "
                "processes), then upgrade and start them with the new version; or give --while-running to "
                "migrate under them (docs/upgrading.md)")
        migrate(url, revision)
    console.print(f"offsets_db at {without_password(url)} is at revision {revision}")


@app.command("prune")
def prune(apply: bool = typer.Option(False, "--apply/--dry-run", help="remove (by default a dry run only says what "
                                     "would go)"),
          job: list[str] = typer.Option([], "--job", help="only this job's history (repeat for more); default: "
                                        "every job's"),
          ) -> None:
    """Remove offsets_db's history older than its ages (STREAMFILL_RETAIN_HISTORY, _WINDOWS, _DEAD_LETTERS,
    _QUALITY_RESULTS, _ANNOUNCEMENTS, _STAGES, _DELETED_KEYS: those whose records Kafka no longer holds) and the
    staging tables no running launch uses. Never what a job needs to resume. A dry run unless --apply
    (docs/operations.md#retention)."""
    from streamfill.console import refusals, say
    from streamfill.offsets_db.engine import reaching
    from streamfill.spark_jobs.maintenance import prune as run_prune

    settings = get_settings()
    url = settings.offsets_db_url
    with refusals(), reaching(url):
        pruned = run_prune(url, settings.retention(), apply=apply, jobs=job or None, progress=say,
                           kafka=settings.kafka_client())
    for line in pruned.lines():
        say(line)


def _plain(value: str, what: str = "role") -> str:
    import re

    from streamfill.names import PLAIN_NAME

    if not re.match(PLAIN_NAME, value):
        raise typer.BadParameter(f"{value!r} is not a plain {what} name: use lowercase letters, digits and _ "
                                 "(at most 63, not starting with a digit)")
    return value


def _role(value: str) -> str:
    return _plain(value)


@app.command("grants")
def grants(
    owner: str = typer.Option("streamfill_owner", "--owner", callback=_role,
                              help="the migration owner: owns offsets_db's schema, runs `streamfill db upgrade`"),
    job: str = typer.Option("streamfill_job", "--job", callback=_role,
                            help="the jobs' role: writes offsets_db and the target tables"),
    reader: str = typer.Option("streamfill_reader", "--reader", callback=_role,
                               help="the streamfill page's and people's role: reads offsets_db and the targets"),
    target_schema: list[str] = typer.Option(["public"], "--target-schema",
                                            help="a schema the jobs create their tables in (repeat for more)"),
    database: str | None = typer.Option(None, "--database",
                                        help="the database (default: STREAMFILL_DB_URL's)"),
) -> None:
    """Print the SQL a DBA runs once to create streamfill's three roles with the least privileges they need."""
    from sqlalchemy import make_url

    from streamfill.offsets_db import grants as roles

    settings = get_settings()
    for name in target_schema:
        _plain(name, "schema")
    db = database or make_url(settings.offsets_db_url).database
    print(roles.script(db, settings.db_schema, roles.Roles(owner, job, reader), target_schema), end="")

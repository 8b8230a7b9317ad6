"""`streamfill db upgrade`: offsets_db's migrations; `streamfill db grants`: the roles a DBA creates for it."""

from __future__ import annotations

import typer

from spark_jobs.runs import console
from streamfill.settings import get_settings

app = typer.Typer(no_args_is_help=True, help="offsets_db in PostgreSQL.")


@app.command("upgrade")
def upgrade(revision: str = typer.Argument("head", help="Alembic revision to upgrade to")) -> None:
    """Apply offsets_db migrations to STREAMFILL_DB_URL (the local stack's database by default)."""
    from sqlalchemy.exc import OperationalError

    from offsets_db.migrate import upgrade as migrate
    from spark_jobs.runs import safe_url, unreachable

    url = get_settings().offsets_db_url
    try:
        migrate(url, revision)
    except OperationalError as exc:
        raise unreachable(url, exc) from None
    console.print(f"offsets_db at {safe_url(url)} is at revision {revision}")


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

    from offsets_db import grants as roles

    settings = get_settings()
    for name in target_schema:
        _plain(name, "schema")
    db = database or make_url(settings.offsets_db_url).database
    print(roles.script(db, settings.db_schema, roles.Roles(owner, job, reader), target_schema), end="")

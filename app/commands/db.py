"""`streamfill db upgrade`: offsets_db's migrations."""

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

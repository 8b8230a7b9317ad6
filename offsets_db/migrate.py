"""Alembic, configured in code: `streamfill db upgrade` and `streamfill stack up` call upgrade()."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # configparser interpolation
    return cfg


def scripts():
    """The migrations as Alembic reads them (no database needed)."""
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg)


def head() -> str:
    """The newest revision the migrations bring."""
    return scripts().get_current_head()


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)

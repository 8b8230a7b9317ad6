"""The application role on the stack's PostgreSQL: its password, its two databases and its search_path."""

from __future__ import annotations

from psycopg2 import sql
from psycopg2.extensions import encrypt_password

from streamfill.settings import Settings

__all__ = ["ensure_app_role"]


def ensure_app_role(conn, settings: Settings, password: str) -> None:
    """Create or update db_user with password (sent as a SCRAM verifier, never in clear) and create its
    databases, owned by it so PG 15's schema grant is not needed. Idempotent; conn is the superuser's, in
    autocommit (CREATE DATABASE runs outside a transaction)."""
    s = settings
    with conn.cursor() as cur:
        verifier = encrypt_password(password, s.db_user, conn, "scram-sha-256")
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (s.db_user,))
        verb = "ALTER" if cur.fetchone() else "CREATE"
        cur.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(s.db_user)),
                    (verifier,))
        for db in (s.db_name, s.airflow_db_name):
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(db), sql.Identifier(s.db_user)))
        # a table a job names without a schema lands in public, not in offsets_db's schema (which the
        # default "$user" would find first, both being named streamfill); the views read unqualified
        cur.execute(sql.SQL("ALTER ROLE {} SET search_path = public, {}").format(
            sql.Identifier(s.db_user), sql.Identifier(s.db_schema)))

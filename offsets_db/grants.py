"""The three roles a DBA creates for streamfill, and the check a launch makes of its own.

- the migration owner: owns offsets_db's schema, runs `streamfill db upgrade` (DDL there, nowhere else);
- the job role: reads and writes offsets_db's tables, creates and writes target tables (and their staging
  tables) in the schemas it is granted, nothing else;
- the reader: SELECT on offsets_db's tables and views (the streamfill page and people's SQL) and on the tables
  the job role creates.

Default privileges give the job role and the reader every table the owner's migrations create later, so the
script runs once, before the first `streamfill db upgrade`. Identifiers are quoted, role names as literals too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamfill.errors import MissingGrant
from streamfill.offsets_db import schema as home
from streamfill.offsets_db.schema import quote

WRITE = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class Roles:
    owner: str = "streamfill_owner"
    job: str = "streamfill_job"
    reader: str = "streamfill_reader"


def _ids(*names: str) -> str:
    return ", ".join(map(quote, names))


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def job_tables(schema: str, job: str) -> str:
    return f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {quote(schema)} TO {quote(job)}"


def job_sequences(schema: str, job: str) -> str:
    return f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {quote(schema)} TO {quote(job)}"


def schema_usage(schema: str, *roles: str) -> str:
    return f"GRANT USAGE ON SCHEMA {quote(schema)} TO {_ids(*roles)}"


def target_schema(schema: str, job: str) -> str:
    return f"GRANT USAGE, CREATE ON SCHEMA {quote(schema)} TO {quote(job)}"


def statements(database: str, schema: str, roles: Roles, targets: Sequence[str]) -> list[tuple[str, str]]:
    """(why, statement) in the order a DBA runs them, as a superuser: making a schema for the owner and setting
    default privileges for roles needs membership in them, which creating a role does not give."""
    owner, job, reader = roles.owner, roles.job, roles.reader
    s = quote(schema)
    out = [(f"role {role} (then set its password: \\password {role})",
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {_literal(role)}) THEN "
            f"CREATE ROLE {quote(role)} LOGIN; END IF; END $$") for role in (owner, job, reader)]
    out += [
        ("all three connect", f"GRANT CONNECT ON DATABASE {quote(database)} TO {_ids(owner, job, reader)}"),
        ("the owner's schema: its migrations create offsets_db there",
         f"CREATE SCHEMA IF NOT EXISTS {s} AUTHORIZATION {quote(owner)}"),
        ("the job role and the reader find its tables", schema_usage(schema, job, reader)),
        ("the job role writes the tables the owner's migrations create, and draws their ids",
         f"ALTER DEFAULT PRIVILEGES FOR ROLE {quote(owner)} IN SCHEMA {s} "
         f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {quote(job)}"),
        ("", f"ALTER DEFAULT PRIVILEGES FOR ROLE {quote(owner)} IN SCHEMA {s} "
             f"GRANT USAGE, SELECT ON SEQUENCES TO {quote(job)}"),
        ("the reader reads them, tables and views",
         f"ALTER DEFAULT PRIVILEGES FOR ROLE {quote(owner)} IN SCHEMA {s} GRANT SELECT ON TABLES TO {quote(reader)}"),
        ("the same for what is there already", job_tables(schema, job)),
        ("", job_sequences(schema, job)),
        ("", f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {quote(reader)}"),
    ]
    for target in targets:
        t = quote(target)
        out += [
            (f"the job role creates and writes its tables (and their staging tables) in {target}",
             target_schema(target, job)),
            (f"the reader reads the tables the job role creates in {target} (the page shows their keys)",
             f"GRANT USAGE ON SCHEMA {t} TO {quote(reader)}"),
            ("", f"ALTER DEFAULT PRIVILEGES FOR ROLE {quote(job)} IN SCHEMA {t} "
                 f"GRANT SELECT ON TABLES TO {quote(reader)}"),
        ]
    return out


def script(database: str, schema: str, roles: Roles, targets: Sequence[str]) -> str:
    """The statements as SQL a DBA runs with psql."""
    lines = [f"-- streamfill's roles in database {database}: run as a superuser, then `streamfill db upgrade` as "
             f"{roles.owner}"]
    for why, stmt in statements(database, schema, roles, targets):
        if why:
            lines.append(f"-- {why}")
        lines.append(stmt + ";")
    return "\n".join(lines) + "\n"


def _fix(stmt: str) -> str:
    return f"{stmt}; `streamfill db grants` prints every statement"


def check_job_role(cur, schema: str | None = None) -> None:
    """Before a launch records anything: the connection's role may use offsets_db's schema, write its tables and
    draw ids from its sequences. MissingGrant names the first privilege missing and the GRANT that gives it."""
    schema = schema or home.name()
    cur.execute("SELECT current_user, has_schema_privilege(current_user, %s, 'USAGE')", (schema,))
    role, usage = cur.fetchone()
    if not usage:
        raise MissingGrant(f"role {role} lacks USAGE on schema {schema} (offsets_db's): "
                           f"{_fix(schema_usage(schema, role))}")
    cur.execute("""
        SELECT c.relname::text, c.relkind::text, p.privilege
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN unnest(CASE c.relkind WHEN 'S' THEN ARRAY['USAGE'] ELSE %s END) AS p(privilege)
        WHERE n.nspname = %s AND (c.relkind = 'S' OR c.relname = ANY(%s))
          AND NOT CASE c.relkind WHEN 'S' THEN has_sequence_privilege(c.oid, p.privilege)
                                 ELSE has_table_privilege(c.oid, p.privilege) END
        ORDER BY c.relkind, c.relname, p.privilege LIMIT 1""", (list(WRITE), schema, list(home.tables())))
    found = cur.fetchone()
    if found:
        name, kind, privilege = found
        fix = job_sequences(schema, role) if kind == "S" else job_tables(schema, role)
        raise MissingGrant(f"role {role} lacks {privilege} on {schema}.{name}: {_fix(fix)}")


def check_target(cur, schema: str, table: str, exists: bool, privileges: Sequence[str]) -> None:
    """A job's target: CREATE in its schema (its staging tables live beside it, and a missing table is made
    there), and on an existing table the privileges its write mode needs."""
    cur.execute("SELECT current_user, has_schema_privilege(current_user, %s, 'CREATE')", (schema,))
    role, create = cur.fetchone()
    if not create:
        raise MissingGrant(f"role {role} lacks CREATE on schema {schema} (the table {table} and its staging "
                           f"tables are made there): {_fix(target_schema(schema, role))}")
    if not exists:
        return
    cur.execute("SELECT p FROM unnest(%s::text[]) p WHERE NOT has_table_privilege(%s, p) LIMIT 1",
                (list(privileges), f"{quote(schema)}.{quote(table)}"))
    found = cur.fetchone()
    if found:
        grant = f"GRANT {', '.join(privileges)} ON {quote(schema)}.{quote(table)} TO {quote(role)}"
        raise MissingGrant(f"role {role} lacks {found[0]} on {schema}.{table}, the job's table: {_fix(grant)}")

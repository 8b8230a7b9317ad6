"""Who may connect to the stack's PostgreSQL, and how.

TCP: every role with its password (SCRAM-SHA-256), the superuser never. The socket, in a 0700 directory under
STREAMFILL_HOME: peer authentication, and only for the OS users who run the stack (the one running
`stack up` and the server's own OS user), as the superuser or the application role. No `trust` anywhere:
with trust every local OS user could connect as any role, superuser included.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MAP", "SUPERUSER", "hba_conf", "ident_conf", "stack_os_users", "uses_trust", "write_conf"]

SUPERUSER = "postgres"
MAP = "stack"
HEADER = "# Written by `streamfill stack up` (cli/stack/pg_auth.py) at every start; edits here are lost.\n"


def hba_conf() -> str:
    """pg_hba.conf: first matching line wins."""
    return HEADER + "\n".join([
        "# the socket: OS users of the map in pg_ident.conf, as the roles it lists",
        f"local  all  all                peer map={MAP}",
        "# TCP: never the superuser; every other role with its password",
        f"host   all  {SUPERUSER:<9} all  reject",
        "host   all  all       all  scram-sha-256",
        "",
    ])


def ident_conf(os_users: Iterable[str], roles: Iterable[str]) -> str:
    """pg_ident.conf: each OS user that runs the stack may be each of roles over the socket."""
    roles = list(dict.fromkeys(roles))
    lines = [f"{MAP}  {user}  {role}" for user in dict.fromkeys(os_users) for role in roles]
    return HEADER + "# map  OS user  role\n" + "\n".join(lines) + "\n"


def stack_os_users(server_os_user: str) -> list[str]:
    """The OS user running this command, then the server's own (`postgres` when the stack runs as root)."""
    return list(dict.fromkeys([pwd.getpwuid(os.geteuid()).pw_name, server_os_user]))


def uses_trust(hba_text: str) -> bool:
    """True when an active line of a pg_hba.conf lets anyone in without a password (older stacks' initdb
    --auth=trust)."""
    return any("trust" in line.split("#", 1)[0].split() for line in hba_text.splitlines())


def write_conf(path: Path, text: str, owner: tuple[int, int] | None) -> bool:
    """Replace path with text (mode 0600, owned by the server's OS user) when it differs; True when it did."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(path.name + ".streamfill-new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    if owner is not None:
        os.chown(tmp, *owner)
    tmp.replace(path)
    return True

"""Files that hold a secret: created with their final mode (0600, in a 0700 directory), never chmodded after
the secret is in them, so no other OS user can read them even for a moment."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from streamfill.errors import StackError

__all__ = ["ensure_secret", "generate_password", "private_dir", "write_private"]


def generate_password() -> str:
    """URL-safe, so it fits a database URL, an env var and a JSON file unquoted."""
    return secrets.token_urlsafe(24)


def private_dir(path: Path) -> Path:
    """path (and missing parents) as a directory only its owner can enter."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # an existing directory too: it holds no secret until this returns
    return path


def write_private(path: Path, text: str) -> None:
    """Create path with mode 0600 and text; an existing file is left as it is (FileExistsError)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def ensure_secret(path: Path, make: Callable[[], str]) -> None:
    """Create path with make()'s text when missing; an existing file keeps its secret but loses any group or
    other permission it had."""
    try:
        write_private(path, make())
    except FileExistsError:
        pass
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        try:
            os.chmod(path, mode & 0o700)
        except OSError as exc:
            raise StackError(f"{path} holds a secret but is readable by others (mode {mode:o}) and cannot be "
                             f"made private ({exc}); run `chmod 600 {path}`") from None

"""Bounded logs: a file the stack redirects output to is rotated when a service starts and it has grown past a
size limit, and only a few generations are kept, so `.stack/logs` cannot fill the disk over weeks of use.

Kafka rotates its own log (log4j2's rolling file, same limits) and PostgreSQL's logging collector starts a
new file daily or at the size limit; `prune` keeps the newest of those.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MAX_BYTES", "KEEP", "rotate", "prune"]

MAX_BYTES = 10 * 1024 * 1024
KEEP = 3  # older generations: <log>.1 (newest) .. <log>.3


def rotate(path: Path, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> bool:
    """When path is over max_bytes: <path>.1 .. <path>.<keep-1> move one generation up, path becomes
    <path>.1, and <path>.<keep> (the oldest) is deleted. True when it rotated."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False

    def generation(n: int) -> Path:
        return path.with_name(f"{path.name}.{n}")

    generation(keep).unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        if generation(n).exists():
            generation(n).rename(generation(n + 1))
    if keep > 0:
        path.rename(generation(1))
    else:
        path.unlink()
    return True


def prune(directory: Path, pattern: str, keep: int) -> list[Path]:
    """Delete all but the newest keep files of directory matching pattern (newest by modification time);
    returns what was deleted."""
    try:
        found = sorted(directory.glob(pattern), key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    except FileNotFoundError:
        return []
    old = found[keep:]
    for p in old:
        p.unlink(missing_ok=True)
    return old

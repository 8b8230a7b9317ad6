"""A URL as it may be shown: in a message, a log line or a lineage event, never with its password."""

from __future__ import annotations

from urllib.parse import urlsplit

HIDDEN = "***"


def without_password(url: str) -> str:
    """`url` with its password, if any, replaced by ***."""
    parts = urlsplit(str(url))
    if parts.password is None:
        return str(url)
    netloc = parts.netloc.replace(f":{parts.password}@", f":{HIDDEN}@")
    return parts._replace(netloc=netloc).geturl()

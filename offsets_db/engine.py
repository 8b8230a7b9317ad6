"""The one way streamfill opens a SQLAlchemy engine on PostgreSQL: with the timeouts and keepalives of
`streamfill.pg` on every connection."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine

from streamfill.pg import connect_args


def make_engine(url: str, **kwargs) -> Engine:
    return create_engine(url, connect_args=connect_args(), pool_pre_ping=True, **kwargs)

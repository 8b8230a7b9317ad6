"""How every PostgreSQL connection of streamfill behaves when something hangs: timeouts and TCP keepalives
(and when a staging table left by a dead driver is swept).

Without them a commit's lock can wait for hours behind a COPY from a lost executor, and a connection to a
machine that vanished is only noticed by the kernel after about two hours. Each is a `STREAMFILL_PG_*`
environment variable, so the driver, the executors and Airflow's tasks all read the same values."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

_PG_DURATION = r"^\d+\s*(ms|s|min|h|d)$"  # PostgreSQL's own spelling of a duration setting


class PgSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STREAMFILL_PG_", extra="ignore")

    lock_timeout: str = Field("60s", pattern=_PG_DURATION,
                              description="a statement waiting this long for a lock fails (its batch replays)")
    statement_timeout: str = Field("30min", pattern=_PG_DURATION,
                                   description="the longest one statement (a COPY, a batch's move) may run")
    idle_in_transaction_timeout: str = Field("10min", pattern=_PG_DURATION,
                                             description="a transaction left open by a stuck client is ended")
    connect_timeout: int = Field(10, ge=1, description="seconds to wait for a connection")
    keepalives_idle: int = Field(30, ge=1, description="seconds of silence before TCP keepalive probes start")
    keepalives_interval: int = Field(10, ge=1, description="seconds between keepalive probes")
    keepalives_count: int = Field(3, ge=1, description="unanswered probes before the connection is dropped")
    stage_orphan_after_s: float = Field(86_400, gt=0, description="a single write's staging table older than this "
                                        "is an orphan (its driver died) and is dropped by the next write")


def connect_args(options: str = "", settings: PgSettings | None = None) -> dict:
    """libpq keywords for psycopg2.connect(dsn, **connect_args()) and create_engine(url, connect_args=...).
    `options` adds server settings of the caller's own (e.g. `-c TimeZone=UTC`)."""
    s = settings or PgSettings()
    server = (f"-c lock_timeout={s.lock_timeout.replace(' ', '')} "
              f"-c statement_timeout={s.statement_timeout.replace(' ', '')} "
              f"-c idle_in_transaction_session_timeout={s.idle_in_transaction_timeout.replace(' ', '')} "
              # the server's side too: a session whose client vanished (holding a job's lock) ends in about a minute
              f"-c tcp_keepalives_idle={s.keepalives_idle} -c tcp_keepalives_interval={s.keepalives_interval} "
              f"-c tcp_keepalives_count={s.keepalives_count}")
    return {"connect_timeout": s.connect_timeout, "keepalives": 1, "keepalives_idle": s.keepalives_idle,
            "keepalives_interval": s.keepalives_interval, "keepalives_count": s.keepalives_count,
            "options": f"{server} {options}".strip()}

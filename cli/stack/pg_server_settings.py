"""The settings the stack's PostgreSQL server starts with: its addresses, TLS files, logging collector and
sizing, as the `-o` options of pg_ctl."""

from __future__ import annotations

from pathlib import Path

from streamfill.cli.stack.logrotate import MAX_BYTES
from streamfill.settings import Settings

__all__ = ["LOGGING", "LOG_FILES", "PG_TUNING", "server_options"]

# sized for bulk loads on a workstation: Postgres' defaults (128 MB buffers, 1 GB of WAL between checkpoints)
# make every large micro-batch wait for checkpoints
PG_TUNING = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "15min",
             "wal_compression": "lz4", "work_mem": "64MB", "maintenance_work_mem": "512MB",
             # publications and logical replication slots work as on a production server (CDC of the tables)
             "wal_level": "logical"}
# the logging collector starts a new file daily or at the size limit; each start keeps the newest LOG_FILES
LOG_FILES = 5
LOGGING = {"logging_collector": "on", "log_filename": "postgresql-%Y%m%d-%H%M%S.log", "log_rotation_age": "1d",
           "log_rotation_size": f"{MAX_BYTES // 1024}kB", "log_file_mode": "0600"}


def server_options(settings: Settings, data_dir: Path, socket_dir: Path, server_logs: Path) -> str:
    """pg_ctl's `-o`: the port, the socket directory and every `-c` setting."""
    values = {"listen_addresses": settings.host, "unix_socket_permissions": "0700",
              "log_directory": str(server_logs), "ssl": "on",
              "ssl_cert_file": str(data_dir / "server.crt"),
              "ssl_key_file": str(data_dir / "server.key"), **LOGGING, **PG_TUNING}
    return f"-p {settings.pg_port} -k {socket_dir} " + " ".join(f"-c {k}={v}" for k, v in values.items())

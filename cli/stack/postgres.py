"""PostgreSQL from the OS packages, in a project-local data directory, with the offsets and Airflow databases.

Clients connect over TCP as db_user with the stack's password; the stack itself talks to the server as the
superuser through the socket (see cli/stack/pg_auth.py for who may connect how).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from contextlib import closing
from pathlib import Path

import psycopg2

from streamfill.cli.stack.logrotate import prune, rotate
from streamfill.cli.stack.os_packages import install_os_packages
from streamfill.cli.stack.pg_auth import SUPERUSER, hba_conf, ident_conf, stack_os_users, uses_trust, write_conf
from streamfill.cli.stack.pg_roles import ensure_app_role
from streamfill.cli.stack.pg_server_settings import LOG_FILES, server_options
from streamfill.cli.stack.pidfile import cmdline, pid_alive
from streamfill.cli.stack.process import wait_until
from streamfill.cli.stack.secret_file import ensure_secret, generate_password, private_dir, write_private
from streamfill.cli.stack.service import Service, Status
from streamfill.cli.stack.tls import ensure_server_pem, split_pem, stack_hosts
from streamfill.errors import StackError
from streamfill.settings import Settings

OS_USER = "postgres"


def pg_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def socket_dir(settings: Settings) -> Path:
    return settings.home / "run"


def admin_url(settings: Settings, database: str = "postgres") -> str:
    """The superuser through the stack's socket (peer authentication: only the OS user running the stack)."""
    return f"postgresql+psycopg2://{SUPERUSER}@/{database}?host={socket_dir(settings)}&port={settings.pg_port}"


class Postgres(Service):
    name = "postgres"
    directory = "pg"

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (initdb's -D): the service's own directory."""
        return self.root

    @property
    def socket_dir(self) -> Path:
        return socket_dir(self.settings)

    @property
    def server_logs(self) -> Path:
        """The logging collector's files; self.log only gets what the server writes before the collector runs."""
        return self.settings.logs / "postgres"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.pg_port, "STREAMFILL_PG_PORT")]

    def _os_owner(self) -> tuple[int, int] | None:
        """(uid, gid) the server runs as when the stack runs as root; None when it runs as this user."""
        if os.geteuid() != 0:
            return None
        pw = pwd.getpwnam(OS_USER)
        return pw.pw_uid, pw.pw_gid

    def _as_owner(self, cmd: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root
        return ["runuser", "-u", OS_USER, "--", *cmd] if os.geteuid() == 0 else cmd

    def _bin(self, tool: str) -> str:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise StackError("PostgreSQL binaries not found under /usr/lib/postgresql; run `streamfill stack up`")
        return str(bin_dir / tool)

    def pg_ctl(self, *args: str) -> list[str]:
        """The command line of this stack's pg_ctl on its data directory, run as the server's OS user."""
        return self._as_owner([self._bin("pg_ctl"), "-D", str(self.data_dir), *args])

    def password(self) -> str:
        """What clients send as db_user: STREAMFILL_PG_PASSWORD, else the stack's file (generated once)."""
        file = self.settings.pg_password_file
        private_dir(file.parent)
        ensure_secret(file, generate_password)
        return self.settings.db_password()

    def prepare(self) -> None:
        if pg_bin_dir() is None:
            install_os_packages("postgresql")
            self._stop_debian_cluster()
        for d in (self.settings.home, self.settings.logs):
            d.mkdir(parents=True, exist_ok=True)
        private_dir(self.socket_dir)
        private_dir(self.server_logs)
        self.password()
        owner = self._os_owner()
        if owner is not None:
            for d in (self.socket_dir, self.server_logs):
                os.chown(d, *owner)
            os.close(os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            os.chown(self.log, *owner)
            self._check_reachable()
        if not (self.data_dir / "PG_VERSION").exists():
            if self.data_dir.exists():
                shutil.rmtree(self.data_dir)
            self.data_dir.mkdir(mode=0o700)
            if owner is not None:
                os.chown(self.data_dir, *owner)
            self._run([self._bin("initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "--auth-local=peer",
                       "--auth-host=scram-sha-256", "-E", "UTF8"], "initdb")
        self._write_auth()
        self._write_tls(owner)

    def _write_tls(self, owner: tuple[int, int] | None) -> None:
        """The server's key and certificate, signed by the stack's CA, where `ssl_cert_file` and `ssl_key_file`
        point: in the data directory, 0600, the server's OS user's (PostgreSQL refuses a key others may read)."""
        key, chain = split_pem(ensure_server_pem(self.settings.tls_dir, "postgres", stack_hosts(self.settings)))
        for name, text in (("server.key", key), ("server.crt", chain)):
            path = self.data_dir / name
            if path.exists() and path.read_text() == text:
                continue
            path.unlink(missing_ok=True)
            write_private(path, text)
            if owner is not None:
                os.chown(path, *owner)

    def socket_users(self) -> list[str]:
        """The OS users the socket admits: this one and the server's (`postgres` when run as root)."""
        return stack_os_users(OS_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)

    def _write_auth(self) -> bool:
        """pg_hba.conf and pg_ident.conf as pg_auth says; True when either changed."""
        owner = self._os_owner()
        hba = write_conf(self.data_dir / "pg_hba.conf", hba_conf(), owner)
        ident = write_conf(self.data_dir / "pg_ident.conf",
                           ident_conf(self.socket_users(), [SUPERUSER, self.settings.db_user]), owner)
        return hba or ident

    def _stop_debian_cluster(self) -> None:
        """The package may start its own `main` cluster on 5432; the stack runs its own data directory."""
        if shutil.which("pg_ctlcluster") is None:
            return
        listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            version, cluster, _port, state, *_ = line.split()
            if state == "online":
                subprocess.run(["pg_ctlcluster", version, cluster, "stop"], capture_output=True)

    def _check_reachable(self) -> None:
        probe = subprocess.run(["runuser", "-u", OS_USER, "--", "test", "-w", str(self.socket_dir)])
        if probe.returncode != 0:
            raise StackError(
                f"the OS user {OS_USER!r} cannot reach {self.settings.home}; PostgreSQL must run as that user. "
                f"Set STREAMFILL_HOME to a directory it can traverse (e.g. under /var/tmp)")

    def _run(self, cmd: list[str], what: str) -> None:
        done = subprocess.run(self._as_owner(cmd), capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"postgres {what} failed ({' '.join(cmd)}):\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
                             f"\nsee its log: {self.log}")

    def _postmaster(self) -> list[str]:
        """postmaster.pid's lines: pid, data directory, start time (Unix), port, socket directory, ..."""
        try:
            return (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return []

    def pid(self) -> int | None:
        """The postmaster's pid while that process is a PostgreSQL server. A postmaster.pid whose process is
        gone, or whose pid now names something that is no PostgreSQL at all, is stale and removed (the
        next start would otherwise be refused); a live postgres is never touched."""
        try:
            pid = int(self._postmaster()[0])
        except (ValueError, IndexError):
            return None
        argv = cmdline(pid) if pid_alive(pid) else []
        if argv and Path(argv[0]).name in ("postgres", "postmaster"):
            return pid
        if not pid_alive(pid) or argv:
            (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        return None

    def running(self) -> bool:
        return self.pid() is not None

    def started_at(self) -> float | None:
        try:
            return float(self._postmaster()[2]) if self.running() else None
        except (ValueError, IndexError):
            return None

    def start(self) -> None:
        s = self.settings
        rotate(self.log)
        prune(self.server_logs, "postgresql-*.log", LOG_FILES - 1)
        opts = server_options(s, self.data_dir, self.socket_dir, self.server_logs)
        self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log), "-o", opts,
                   "-w", "-t", str(int(s.start_timeout)), "start"], "start")
        wait_until(self.healthy, timeout=s.start_timeout, service=self.name, log=self.log)
        self.secure()

    def _connect(self, dbname: str = "postgres"):
        """The superuser through the socket."""
        return psycopg2.connect(host=str(self.socket_dir), port=self.settings.pg_port, user=SUPERUSER,
                                dbname=dbname, connect_timeout=3)

    def healthy(self) -> bool:
        try:
            with closing(self._connect()) as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                return cur.fetchone() == (1,)
        except psycopg2.Error:
            return False

    def secure(self) -> list[str]:
        """The application role with the clients' password and its two databases (pg_roles), the socket directory
        private, pg_hba.conf and pg_ident.conf as pg_auth
        says (reloaded when they changed). Idempotent; on a server that allowed trust (an older stack's),
        returns what changed for `up` to say, and clients started before must reconnect with the password."""
        s = self.settings
        was_trust = uses_trust(self._read("pg_hba.conf"))
        private_dir(self.socket_dir)
        conn = self._connect()
        conn.autocommit = True
        notes = []
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW ssl")
                if cur.fetchone()[0] != "on":  # a server an older stack started
                    notes.append("TLS (its certificate signed by the stack's CA) applies from its next start "
                                 "(`streamfill stack down` then `streamfill stack up`)")
                ensure_app_role(conn, s, self.password())
                if not self._write_auth():
                    return notes
                cur.execute("SELECT pg_reload_conf()")
                cur.execute("SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL")
                errors = cur.fetchall()
                if errors:
                    raise StackError(f"PostgreSQL refused the pg_hba.conf the stack wrote ({errors}); it keeps "
                                     f"the previous rules. See {self.data_dir / 'pg_hba.conf'} and {self.log}")
                cur.execute("SHOW logging_collector")
                restart = cur.fetchone()[0] != "on"
        finally:
            conn.close()
        if not was_trust:
            return notes
        return ["trust authentication replaced: TCP now needs the password of "
                f"{s.db_user} (in {s.pg_password_file}), the socket only admits "
                f"{', '.join(self.socket_users())}"
                ] + (["its socket and log settings apply from its next start (`streamfill stack down` then "
                      "`streamfill stack up`)"] if restart else []) + notes

    def _read(self, name: str) -> str:
        try:
            return (self.data_dir / name).read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.running():
            self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "stop", "-m", "fast", "-w"], "stop")

    def status(self) -> Status:
        s = self.settings
        running = self.running()
        where = "STREAMFILL_PG_PASSWORD" if s.pg_password is not None else str(s.pg_password_file)
        return Status(self.name, f"{s.host}:{s.pg_port}", self.pid(), running, running and self.healthy(),
                      self.log, f"databases {s.db_name}, {s.airflow_db_name}; user {s.db_user}, password in "
                      f"{where}; server log files in {self.server_logs}")

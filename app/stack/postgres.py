"""PostgreSQL from the OS packages, in a project-local data directory, with the offsets and Airflow databases."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from contextlib import closing
from pathlib import Path

import psycopg2
from psycopg2 import sql

from app.stack.process import pid_alive, wait_until
from app.stack.service import Service, Status
from streamfill.errors import StackError

OS_USER = "postgres"


def pg_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def install_os_packages(*packages: str) -> None:
    """apt-get install packages; needs root (the local stack installs what it runs)."""
    if os.geteuid() != 0:
        raise StackError(f"{', '.join(packages)} not installed and not running as root: "
                         f"install them with `sudo apt-get install -y {' '.join(packages)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"`{' '.join(cmd)}` failed:\n{done.stderr[-2000:]}")


PG_TUNING = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "15min",
             "wal_compression": "lz4", "work_mem": "64MB", "maintenance_work_mem": "512MB"}

class Postgres(Service):
    name = "postgres"

    @property
    def data_dir(self) -> Path:
        return self.settings.home / "pg"

    @property
    def socket_dir(self) -> Path:
        return self.settings.home / "run"

    def ports(self) -> list[tuple[int, str]]:
        return [(self.settings.pg_port, "STREAMFILL_PG_PORT")]

    def _as_owner(self, cmd: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root
        return ["runuser", "-u", OS_USER, "--", *cmd] if os.geteuid() == 0 else cmd

    def _bin(self, tool: str) -> str:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise StackError("PostgreSQL binaries not found under /usr/lib/postgresql; run `streamfill stack up`")
        return str(bin_dir / tool)

    def prepare(self) -> None:
        if pg_bin_dir() is None:
            install_os_packages("postgresql")
            self._stop_debian_cluster()
        for d in (self.settings.home, self.settings.logs, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(OS_USER)
            os.chown(self.socket_dir, pw.pw_uid, pw.pw_gid)
            self.log.touch(exist_ok=True)
            os.chown(self.log, pw.pw_uid, pw.pw_gid)
            self._check_reachable()
        if not (self.data_dir / "PG_VERSION").exists():
            if self.data_dir.exists():
                shutil.rmtree(self.data_dir)
            self.data_dir.mkdir(mode=0o700)
            if os.geteuid() == 0:
                pw = pwd.getpwnam(OS_USER)
                os.chown(self.data_dir, pw.pw_uid, pw.pw_gid)
            self._run([self._bin("initdb"), "-D", str(self.data_dir), "-U", "postgres",
                       "--auth=trust", "-E", "UTF8"], "initdb")

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

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid)

    def start(self) -> None:
        s = self.settings
        # sized for bulk loads on a workstation: Postgres' defaults (128 MB buffers, 1 GB of WAL between
        # checkpoints) make every large micro-batch wait for checkpoints
        tuning = " ".join(f"-c {k}={v}" for k, v in PG_TUNING.items())
        opts = f"-p {s.pg_port} -k {self.socket_dir} -c listen_addresses={s.host} {tuning}"
        self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log), "-o", opts,
                   "-w", "-t", str(int(s.start_timeout)), "start"], "start")
        wait_until(self.healthy, timeout=s.start_timeout, service=self.name, log=self.log)
        self._bootstrap()

    def _connect(self, dbname: str = "postgres", user: str = "postgres"):
        return psycopg2.connect(host=self.settings.host, port=self.settings.pg_port, user=user,
                                dbname=dbname, connect_timeout=3)

    def healthy(self) -> bool:
        try:
            with closing(self._connect()) as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                return cur.fetchone() == (1,)
        except psycopg2.Error:
            return False

    def _bootstrap(self) -> None:
        """The application role and its two databases, owned by it (so PG 15's schema grant is not needed)."""
        s = self.settings
        conn = self._connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (s.db_user,))
                if cur.fetchone() is None:
                    cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(s.db_user)))
                for db in (s.db_name, s.airflow_db_name):
                    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
                    if cur.fetchone() is None:
                        cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(db), sql.Identifier(s.db_user)))
        finally:
            conn.close()

    def stop(self) -> None:
        if self.running():
            self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "stop", "-m", "fast", "-w"], "stop")

    def status(self) -> Status:
        running = self.running()
        return Status(self.name, f"{self.settings.host}:{self.settings.pg_port}", self.pid(), running,
                      running and self.healthy(), self.log,
                      f"databases {self.settings.db_name}, {self.settings.airflow_db_name}; "
                      f"user {self.settings.db_user}")

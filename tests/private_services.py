"""Services of a test's own, to break without breaking the shared stack: a PostgreSQL it may crash, a PgBouncer in
front of the stack's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import make_url

from streamfill.cli.stack.postgres import Postgres
from streamfill.settings import Settings


@contextmanager
def private_postgres(stack_settings: Settings, ports: range) -> Iterator[Postgres]:
    """A PostgreSQL of its own on the first free port of `ports`, with offsets_db installed; removed at the end."""
    from streamfill.cli.stack.process import port_free
    from streamfill.offsets_db.migrate import upgrade

    port = next(p for p in ports if port_free(stack_settings.host, p))
    settings = Settings(home=stack_settings.home / f"test-pg-{uuid.uuid4().hex[:8]}", pg_port=port, db_url=None)
    postgres = Postgres(settings)
    postgres.prepare()
    postgres.start()
    try:
        upgrade(settings.offsets_db_url)
        yield postgres
    finally:
        postgres.stop()
        shutil.rmtree(settings.home, ignore_errors=True)


def crash(postgres: Postgres) -> None:
    """`pg_ctl stop -m immediate`: no shutdown checkpoint; recovery empties UNLOGGED tables."""
    postgres._run([postgres._bin("pg_ctl"), "-D", str(postgres.data_dir), "stop", "-m", "immediate", "-w"], "crash")


POOL_MODES = ("session", "transaction", "statement")


@dataclass
class PgBouncer:
    """A PgBouncer of the test's own in front of the stack's PostgreSQL: one database alias per pool mode, each
    the same database (`url(mode)`); `configure` rewrites its settings and reloads them."""

    ini: Path
    process: subprocess.Popen
    port: int
    database_url: str

    def url(self, mode: str) -> str:
        return make_url(self.database_url).set(host="127.0.0.1", port=self.port, database=mode, query={}) \
            .render_as_string(hide_password=False)

    def configure(self, **settings: str) -> None:
        """The [pgbouncer] settings given, the others as started; then a reload (SIGHUP), as an operator's."""
        write_pgbouncer_ini(self.ini, self.port, self.database_url, settings)
        self.process.send_signal(signal.SIGHUP)


def write_pgbouncer_ini(ini: Path, port: int, database_url: str, settings: dict[str, str]) -> None:
    url = make_url(database_url)
    aliases = "\n".join(f"{mode} = host={url.host} port={url.port} dbname={url.database} pool_mode={mode}"
                         for mode in POOL_MODES)
    lines = {"listen_addr": "127.0.0.1", "listen_port": str(port), "unix_socket_dir": "",
             "auth_type": "scram-sha-256", "auth_file": str(ini.with_name("users.txt")),
             "logfile": str(ini.with_name("pgbouncer.log")), **settings}
    ini.write_text(f"[databases]\n{aliases}\n[pgbouncer]\n" + "".join(f"{k} = {v}\n" for k, v in lines.items()))


@contextmanager
def pgbouncer(stack_settings: Settings, ports: range, database_url: str, **settings: str) -> Iterator[PgBouncer]:
    """Debian's pgbouncer (installed with apt-get when missing, as the stack installs its OS packages) on the
    first free port of `ports`, as PostgreSQL's OS user (it refuses to run as root), its clients authenticated
    with SCRAM by the password of `database_url`'s user; stopped and removed at the end."""
    from streamfill.cli.stack.os_packages import install_os_packages
    from streamfill.cli.stack.postgres import OS_USER
    from streamfill.cli.stack.process import port_free, wait_until

    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        install_os_packages("pgbouncer")
        binary = shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    port = next(p for p in ports if port_free(stack_settings.host, p))
    home = stack_settings.home / f"test-pgbouncer-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o700)
    url = make_url(database_url)
    (home / "users.txt").write_text(f'"{url.username}" "{url.password}"\n')
    ini = home / "pgbouncer.ini"
    write_pgbouncer_ini(ini, port, database_url, settings)
    as_owner = {}
    if os.geteuid() == 0:
        shutil.chown(home, OS_USER)
        for f in home.iterdir():
            shutil.chown(f, OS_USER)
        as_owner = {"user": OS_USER, "group": OS_USER}
    process = subprocess.Popen([binary, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, **as_owner)
    try:
        wait_until(lambda: not port_free(stack_settings.host, port), timeout=30, service="pgbouncer",
                   log=home / "pgbouncer.log", alive=lambda: process.poll() is None)
        yield PgBouncer(ini, process, port, database_url)
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)

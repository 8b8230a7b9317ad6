"""Local security of the stack, on real files: no trust in pg_hba.conf, the superuser only through the socket,
secrets created private, the database password in the settings' URLs (from the environment or the file)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streamfill.cli.stack.pg_auth import hba_conf, ident_conf, uses_trust, write_conf
from streamfill.cli.stack.secret_file import ensure_secret, private_dir, write_private
from streamfill.settings import Settings

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_pg_hba_has_no_trust_and_the_superuser_only_through_the_socket():
    lines = [ln.split() for ln in hba_conf().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines == [["local", "all", "all", "peer", "map=stack"],
                     ["host", "all", "postgres", "all", "reject"],
                     ["host", "all", "all", "all", "scram-sha-256"]]
    assert not uses_trust(hba_conf())
    older = "local all all trust\nhost all all 127.0.0.1/32 trust  # initdb --auth=trust\n"
    assert uses_trust(older) and not uses_trust("# local all all trust\n")
    ident = [ln.split() for ln in ident_conf(["root", "postgres", "root"], ["postgres", "streamfill"]).splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert ident == [["stack", "root", "postgres"], ["stack", "root", "streamfill"],
                     ["stack", "postgres", "postgres"], ["stack", "postgres", "streamfill"]]


def test_pg_conf_files_are_private_and_rewritten_only_when_they_differ(tmp_path):
    conf = tmp_path / "pg_hba.conf"
    conf.write_text("local all all trust\n")
    os.chmod(conf, 0o644)
    assert write_conf(conf, hba_conf(), None)
    assert conf.read_text() == hba_conf() and _mode(conf) == 0o600
    assert not write_conf(conf, hba_conf(), None)


def test_secret_files_are_created_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        secrets_dir = private_dir(tmp_path / "secrets")
        write_private(secrets_dir / "pw", "s3cret")
    finally:
        os.umask(old)
    assert _mode(secrets_dir) == 0o700 and _mode(secrets_dir / "pw") == 0o600
    with pytest.raises(FileExistsError):
        write_private(secrets_dir / "pw", "other")
    os.chmod(secrets_dir / "pw", 0o644)
    ensure_secret(secrets_dir / "pw", lambda: "never used")
    assert (secrets_dir / "pw").read_text() == "s3cret" and _mode(secrets_dir / "pw") == 0o600


def test_the_stack_urls_carry_the_password_from_the_environment_or_else_the_file(monkeypatch, tmp_path):
    monkeypatch.delenv("STREAMFILL_PG_PASSWORD", raising=False)
    monkeypatch.delenv("STREAMFILL_DB_URL", raising=False)
    monkeypatch.delenv("STREAMFILL_PG_PORT", raising=False)
    monkeypatch.delenv("STREAMFILL_PG_SSLMODE", raising=False)
    settings = Settings(home=tmp_path, pg_port=5442)
    assert settings.offsets_db_url == "postgresql+psycopg2://streamfill@127.0.0.1:5442/streamfill"
    private_dir(settings.pg_password_file.parent)
    write_private(settings.pg_password_file, "from-file\n")
    assert settings.offsets_db_url == "postgresql+psycopg2://streamfill:from-file@127.0.0.1:5442/streamfill"
    assert settings.airflow_db_url == "postgresql+psycopg2://streamfill:from-file@127.0.0.1:5442/airflow"
    monkeypatch.setenv("STREAMFILL_PG_PASSWORD", "from env/@:")
    monkeypatch.setenv("STREAMFILL_HOME", str(tmp_path))
    from_env = Settings()
    assert from_env.offsets_db_url == "postgresql+psycopg2://streamfill:from%20env%2F%40%3A@127.0.0.1:5432/streamfill"
    assert "from env" not in repr(from_env)
    monkeypatch.setenv("STREAMFILL_PG_SSLMODE", "verify-full")  # libpq checks the server against the stack's CA
    assert Settings().airflow_db_url == ("postgresql+psycopg2://streamfill:from%20env%2F%40%3A@127.0.0.1:5432/airflow"
                                         f"?sslmode=verify-full&sslrootcert={tmp_path}/tls/ca.pem")

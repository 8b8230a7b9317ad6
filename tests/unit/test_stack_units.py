import socket

import pytest

from streamfill.cli.stack import StackError, _check_ports
from streamfill.cli.stack.kafka import Kafka
from streamfill.cli.stack.process import port_free
from streamfill.settings import Settings

pytestmark = pytest.mark.unit


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("STREAMFILL_PG_PASSWORD", raising=False)
    monkeypatch.delenv("STREAMFILL_PG_SSLMODE", raising=False)
    monkeypatch.setenv("STREAMFILL_KAFKA_PORT", "19092")
    monkeypatch.setenv("STREAMFILL_HOME", str(tmp_path))
    s = Settings()
    assert s.bootstrap_servers == "127.0.0.1:19092"
    assert s.home == tmp_path
    assert s.offsets_db_url == "postgresql+psycopg2://streamfill@127.0.0.1:5432/streamfill"


def test_db_url_setting_wins(monkeypatch):
    monkeypatch.setenv("STREAMFILL_DB_URL", "postgresql+psycopg2://u@db:5433/x")
    assert Settings().offsets_db_url == "postgresql+psycopg2://u@db:5433/x"


def test_a_port_in_use_names_port_service_and_setting(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        settings = Settings(home=tmp_path, kafka_port=port)
        with pytest.raises(StackError) as err:
            _check_ports([Kafka(settings)], settings)
    msg = str(err.value)
    assert str(port) in msg and "kafka" in msg and "STREAMFILL_KAFKA_PORT" in msg
    assert port_free("127.0.0.1", port)


def test_launches_get_the_class_archive_only_once_it_exists_and_keep_their_own_jvm_options(tmp_path):
    from streamfill.spark_jobs import class_archive

    path = class_archive.archive_path(tmp_path)
    if path is None:
        pytest.skip("no java or PySpark here")
    env = {"SPARK_SUBMIT_OPTS": "-Dmine=1"}
    assert class_archive.with_archive(env, tmp_path) == env, "no archive yet: the launch is as before"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    opts = class_archive.with_archive(env, tmp_path)["SPARK_SUBMIT_OPTS"].split()
    assert opts[0] == "-Dmine=1" and f"-XX:SharedArchiveFile={path}" in opts
    own = {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/elsewhere.jsa"}
    assert class_archive.with_archive(own, tmp_path) == own, "an archive the user names stays theirs"
    assert path.parent == tmp_path / "spark" and path.name.startswith("driver-classes-")

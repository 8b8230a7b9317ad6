"""Spark's Kafka security options as librdkafka settings, the refusals' messages, and what stays secret."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamfill.connectors.kafka.broker import retriable
from streamfill.connectors.kafka.client import client_config, not_authorized, refusal
from streamfill.connectors.kafka.options import parse
from streamfill.errors import OptionError
from streamfill.kafka_client import describe, redact, settings_env
from streamfill.orchestration.connections import kafka_client, kafka_connection

pytestmark = pytest.mark.unit

SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="jobs" password="s3\\"cr=t;";'


def test_a_spark_users_security_options_become_librdkafka_settings():
    conf = client_config({"bootstrap.servers": "b:9094", "security.protocol": "sasl_ssl",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM,
                          "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
                          "ssl.endpoint.identification.algorithm": ""})
    assert conf == {"bootstrap.servers": "b:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "jobs", "sasl.password": 's3"cr=t;', "ssl.ca.location": "/etc/ca.pem",
                    "ssl.endpoint.identification.algorithm": "none"}
    plain = client_config({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                               "username='x' password=\"y\";".replace("'x'", '"x"')})
    assert (plain["sasl.username"], plain["sasl.password"]) == ("x", "y")
    pem_keystore = client_config({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k/client.pem"})
    assert pem_keystore == {"ssl.certificate.location": "/k/client.pem", "ssl.key.location": "/k/client.pem"}
    assert client_config({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k/c.p12",
                          "ssl.keystore.password": "p"}) == {"ssl.keystore.location": "/k/c.p12",
                                                             "ssl.keystore.password": "p"}
    source = parse({"kafka.bootstrap.servers": "b:9094", "kafka.sasl.jaas.config": SCRAM, "subscribe": "t"},
                   streaming=True)
    assert source.kafka["sasl.username"] == "jobs" and "sasl.jaas.config" not in source.kafka


@pytest.mark.parametrize("options, option, words", [
    ({"security.protocol": "TLS"}, "kafka.security.protocol", "is not one of PLAINTEXT, SSL"),
    ({"sasl.mechanism": "SCRAM"}, "kafka.sasl.mechanism", "is not one of PLAIN, SCRAM-SHA-256"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "kafka.sasl.jaas.config", "only PlainLoginModule and ScramLoginModule"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\";"},
     "kafka.sasl.jaas.config", 'has no password="..."'),
    ({"ssl.truststore.location": "/etc/truststore.jks", "ssl.truststore.password": "changeit"},
     "kafka.ssl.truststore.location", "keytool -exportcert -rfc"),
    ({"ssl.keystore.location": "/etc/keystore.jks"}, "kafka.ssl.keystore.location", "PKCS12"),
])
def test_settings_librdkafka_cannot_take_are_refused_naming_the_option_and_the_fix(options, option, words):
    with pytest.raises(OptionError) as err:
        client_config(options)
    assert err.value.option == option
    assert words in str(err.value)
    assert "changeit" not in str(err.value) and "password=" not in str(err.value.value)


def test_refusals_name_the_listener_the_mechanism_and_the_setting_to_fix():
    conf = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "jobs", "sasl.password": "hunter2"}
    wrong = refusal(conf, "SASL authentication error: Authentication failed during authentication due to invalid "
                          "credentials with SASL mechanism SCRAM-SHA-512")
    assert "bootstrap servers h:9094 (SASL_SSL, SASL mechanism SCRAM-SHA-512, user jobs)" in wrong
    assert "STREAMFILL_KAFKA_SASL_PASSWORD" in wrong and "hunter2" not in wrong
    untrusted = refusal(conf, "ssl://h:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
                              "certificate verify failed: broker certificate could not be verified")
    assert "not trusted" in untrusted and "kafka.ssl.ca.location" in untrusted
    assert "STREAMFILL_KAFKA_SSL_CA_LOCATION" in untrusted and "extra ssl_ca_location" in untrusted
    assert refusal(conf, "Connection refused") is None
    denied = not_authorized(conf, "payments", "read")
    assert "user jobs may not read topic 'payments'" in denied and "--operation Read --topic payments" in denied


def test_secrets_are_redacted_and_an_airflow_connection_round_trips():
    conf = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "jobs", "sasl.password": "hunter2", "ssl.ca.location": "/ca.pem",
            "ssl.key.password": "k3y"}
    assert "hunter2" not in str(redact(conf)) and "k3y" not in str(redact(conf))
    assert redact(conf)["sasl.username"] == "jobs"

    class Connection:  # the attributes of airflow.models.Connection the mapping reads
        def __init__(self, d: dict) -> None:
            self.conn_type, self.host, self.port = d.get("conn_type"), d.get("host"), d.get("port")
            self.login, self.password, self.extra_dejson = d.get("login"), d.get("password"), d["extra"]

    assert kafka_client(Connection(kafka_connection(conf))) == conf
    assert settings_env(conf)["STREAMFILL_KAFKA_SASL_PASSWORD"] == "hunter2"
    with pytest.raises(OptionError, match="extra security_protocol of connection streamfill_kafka"):
        kafka_client(Connection({"extra": {"bootstrap_servers": "h:1", "security_protocol": "TLS"}}))


def test_the_kafka_providers_connection_is_taken_as_it_is_and_reaches_the_job_whole(monkeypatch):
    """A connection of the apache-kafka provider's type `kafka`: its extra is librdkafka's configuration, secrets
    included. A launched job gets all of it through its environment (STREAMFILL_KAFKA_*), never its argv."""
    from streamfill.settings import Settings

    class Connection:
        conn_type, host, port, login, password = "kafka", None, None, None, None
        extra_dejson = {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "sasl_ssl",
                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "jobs", "sasl.password": "hunter2",
                        "ssl.ca.location": "/ca.pem", "group.id": "team-a-streamfill", "client.id": "orders",
                        "ssl.endpoint.identification.algorithm": "https", "enable.ssl.certificate.verification": True}

    conf = kafka_client(Connection())
    assert conf == {**Connection.extra_dejson, "security.protocol": "SASL_SSL",
                    "enable.ssl.certificate.verification": "true"}
    env = settings_env(conf)
    assert env["STREAMFILL_KAFKA_GROUP_ID"] == "team-a-streamfill" and env["STREAMFILL_KAFKA_SASL_PASSWORD"] == "hunter2"
    for name in list(os.environ):
        if name.startswith("STREAMFILL_KAFKA"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings().kafka_client() == conf  # what the job's own settings give its reader
    assert "hunter2" not in repr(Settings())

    Connection.extra_dejson = {"security.protocol": "SSL"}
    with pytest.raises(OptionError, match="has no bootstrap.servers"):
        kafka_client(Connection())
    Connection.extra_dejson = {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "X"}
    with pytest.raises(OptionError, match="extra sasl.mechanism of connection streamfill_kafka='X'"):
        kafka_client(Connection())


def test_a_bad_kafka_config_setting_is_refused_without_showing_it(monkeypatch):
    from streamfill.settings import get_settings

    monkeypatch.setenv("STREAMFILL_KAFKA_CONFIG", '["sasl.password=hunter2"]')
    with pytest.raises(OptionError) as raised:
        get_settings()
    assert "STREAMFILL_KAFKA_CONFIG" in str(raised.value) and "hunter2" not in str(raised.value)


def test_the_readers_group_id_is_the_users_when_given():
    conf = client_config({"bootstrap.servers": "b:1", "group.id": "team-a-reader"})
    assert parse({"subscribe": "t", "kafka.bootstrap.servers": "b:1", "kafka.group.id": "team-a-reader"},
                 streaming=True).kafka["group.id"] == "team-a-reader" == conf["group.id"]


def test_commit_to_groups_client_is_stored_without_secrets_and_gets_them_only_from_settings_of_the_same_owner():
    """offsets_db keeps the mirror's client without a secret, the mutual-TLS key and certificate files included;
    the committing process adds its settings' secrets only when they name the same cluster and principal."""
    from streamfill.connectors.kafka.group_mirror import client, kept

    read = {"bootstrap.servers": "a:9094,b:9094", "security.protocol": "SSL", "ssl.ca.location": "/ca.pem",
            "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem", "ssl.key.password": "k3y"}
    stored = kept(read)
    assert stored == {k: v for k, v in read.items() if k != "ssl.key.password"}
    settings = {**read, "bootstrap.servers": "b:9094, a:9094"}
    assert client(stored, settings) == read
    for other in ({"bootstrap.servers": "evil:9094"}, {"ssl.key.location": "/other.pem"}, {"sasl.username": "x"}):
        assert "ssl.key.password" not in client(stored, {**settings, **other}), other


def test_the_postgres_connection_carries_libpq_tls_settings_both_ways():
    from sqlalchemy import make_url

    from streamfill.orchestration.connections import postgres_connection, postgres_url

    url = ("postgresql+psycopg2://jobs:p%40ss@db.example.com:6432/warehouse?sslmode=verify-full"
           "&sslrootcert=/etc/ssl/ca.pem")
    conn = postgres_connection(url)
    assert conn["extra"] == {"sslmode": "verify-full", "sslrootcert": "/etc/ssl/ca.pem"} and conn["password"] == "p@ss"

    class Connection:  # the attributes of airflow.models.Connection the mapping reads
        host, port, schema, login, password = "db.example.com", 6432, "warehouse", "jobs", "p@ss"
        extra_dejson = conn["extra"]

    assert make_url(postgres_url(Connection())) == make_url(url)


@pytest.mark.parametrize("code, retried", [
    (KafkaError.NOT_LEADER_FOR_PARTITION, True),  # a partition just added: its leader is being elected
    (KafkaError.LEADER_NOT_AVAILABLE, True),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
    (KafkaError.UNKNOWN_TOPIC_OR_PART, False),  # a deleted topic is data loss, decided at once
])
def test_the_offset_lookup_asks_again_only_while_leadership_moves(code, retried):
    assert retriable(KafkaException(KafkaError(code))) is retried


def test_oauthbearer_with_oidc_client_credentials_passes_to_librdkafka_and_its_secret_is_redacted():
    conf = client_config({"bootstrap.servers": "b:9096", "security.protocol": "SASL_SSL",
                          "sasl.mechanism": "oauthbearer", "sasl.oauthbearer.method": "oidc",
                          "sasl.oauthbearer.client.id": "streamfill", "sasl.oauthbearer.client.secret": "s3cret",
                          "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
                          "sasl.oauthbearer.scope": "kafka"})
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and conf["sasl.oauthbearer.client.secret"] == "s3cret"
    assert "s3cret" not in str(redact(conf)) and "SASL mechanism OAUTHBEARER" in describe(conf)

"""What one Kafka cluster needs of a client: its address, security protocol and credentials, as librdkafka
names them, and which of them are secret.

The same names serve three ways in: `kafka.<property>` options of the data sources (Spark's Kafka names are
translated by connectors.kafka.client), `STREAMFILL_KAFKA_<FIELD>` settings of the CLI and the launched jobs,
and the Airflow connection KAFKA_CONNECTION (login, password, and the extras below by their field name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

KAFKA_CONNECTION = "streamfill_kafka"  # the Airflow connection of the cluster
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kerberos: librdkafka knows it, streamfill is not tested with it, so a launch refuses it
UNSUPPORTED_MECHANISMS = ("GSSAPI",)
# OAUTHBEARER's token source, one of which a launch requires: an OIDC provider's client credentials (production),
# or an unsecured token librdkafka makes itself (a broker with Kafka's unsecured validator: tests)
OIDC_PROPERTIES = ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
                   "sasl.oauthbearer.token.endpoint.url")
UNSECURED_JWT = "enable.sasl.oauthbearer.unsecure.jwt"
DEFAULT_GROUP_ID = "streamfill-reader"  # the reader's consumer group: it assigns partitions and never commits

# field (setting STREAMFILL_KAFKA_<FIELD>, connection extra <field>) -> librdkafka property
CLIENT_FIELDS = {
    "bootstrap_servers": "bootstrap.servers",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "sasl_password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location",
    "ssl_certificate_location": "ssl.certificate.location",
    "ssl_key_location": "ssl.key.location",
    "ssl_key_password": "ssl.key.password",
    "group_id": "group.id",
}
# the setting that carries every other librdkafka property, as a JSON object (a `kafka` connection's extra)
CONFIG_SETTING = "STREAMFILL_KAFKA_CONFIG"
SECRET_PROPERTIES = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.key.pem",
                               "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
                               "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config"})
REDACTED = "********"


# words that mark a property as holding a credential itself (a key's PEM text, a passphrase), where a file's
# location does not
SECRET_WORDS = ("password", "secret", "passphrase", "jaas", ".pem")


def is_secret(prop: str) -> bool:
    name = prop.lower().removeprefix("kafka.")
    return name in SECRET_PROPERTIES or any(word in name for word in SECRET_WORDS)


def redact(conf: Mapping[str, str]) -> dict[str, str]:
    """conf with every secret's value replaced, for logs and messages."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in conf.items()}


def property_value(value: str | int | float | bool) -> str:
    """A librdkafka property's value as text, from JSON (an Airflow extra, STREAMFILL_KAFKA_CONFIG): true, not True."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def settings_env(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` as the STREAMFILL_KAFKA_* environment of a launched job: a setting per field, the other properties
    together in STREAMFILL_KAFKA_CONFIG."""
    env = {f"STREAMFILL_KAFKA_{field.upper()}": conf[prop] for field, prop in CLIENT_FIELDS.items() if prop in conf}
    others = {k: v for k, v in conf.items() if k not in CLIENT_FIELDS.values()}
    return {**env, CONFIG_SETTING: json.dumps(others, sort_keys=True)} if others else env


def setting_names(prop: str) -> str:
    """Where a user sets a librdkafka property, for a message's fix: the option, the setting, the extra."""
    field = next((f for f, p in CLIENT_FIELDS.items() if p == prop), None)
    if field is None:
        return f"the option kafka.{prop}"
    extra = {"sasl_username": "the login", "sasl_password": "the password"}.get(field, f"the extra {field}")
    return (f"the option kafka.{prop}, the setting STREAMFILL_KAFKA_{field.upper()} or {extra} of the Airflow "
            f"connection {KAFKA_CONNECTION}")


def describe(conf: Mapping[str, str]) -> str:
    """The cluster as a message names it: bootstrap servers, protocol, mechanism and user (no secret)."""
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    parts = [protocol]
    if protocol.startswith("SASL"):
        parts.append(f"SASL mechanism {conf.get('sasl.mechanism') or conf.get('sasl.mechanisms') or 'GSSAPI'}")
        if conf.get("sasl.username"):
            parts.append(f"user {conf['sasl.username']}")
    return f"bootstrap servers {conf.get('bootstrap.servers')} ({', '.join(parts)})"

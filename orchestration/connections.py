"""The Airflow connections of a Kafka cluster and of a schema registry, and the settings they stand for.

Connection `streamfill_kafka`, either of the apache-kafka provider's type `kafka`, whose extra is the librdkafka
configuration itself (`bootstrap.servers`, `security.protocol`, `sasl.username`, `sasl.password`, ...; the login
and password fill `sasl.username` and `sasl.password` when the extra does not), or of streamfill's type
`streamfill_kafka`, with form fields in Airflow's connection form (any other type reads the same way): host and
port or the extra `bootstrap_servers`; login and password for SASL; the extras `security_protocol`,
`sasl_mechanism`, `ssl_ca_location`, `ssl_certificate_location`, `ssl_key_location`, `ssl_key_password` and
`group_id` (streamfill.kafka_client's fields). Connection `streamfill_schema_registry` (of the type of that name,
or any): the extra `url` (or the host, a URL), login and password. Airflow masks the password and any extra named
like a secret in its logs and UI.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamfill.errors import OptionError
from streamfill.kafka_client import (
    CLIENT_FIELDS,
    KAFKA_CONNECTION,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    property_value,
)

POSTGRES_CONNECTION = "streamfill_postgres"  # offsets_db and the tables: the database the jobs write
# the same database as the reader role, for the streamfill page in the API server: Airflow resolves a connection id
# alike for the API server and its workers (they ask the API server for it), so the page needs an id of its own
POSTGRES_READER_CONNECTION = "streamfill_postgres_reader"
SCHEMA_REGISTRY_CONNECTION = "streamfill_schema_registry"
# the local stack's Spark Connect server, of the apache-spark provider's type spark_connect: an entry naming it as
# its spark_conn_id runs its stream's driver there, detached from the Airflow task (orchestration/stream_operator.py)
SPARK_CONNECT_CONNECTION = "streamfill_spark_connect"
# Airflow's REST API for the replay form's access check (host = its base URL, a user who may read the runs of every
# DAG); the announcements of a stream's commits need no connection of Airflow's API
API_CONNECTION = "streamfill_airflow_api"
PG_TLS_EXTRAS = ("sslmode", "sslrootcert", "sslcert", "sslkey")  # libpq's, as Airflow's postgres provider names them
_FROM_LOGIN = {"sasl.username": "login", "sasl.password": "password"}
PROVIDER_KAFKA_TYPE = "kafka"  # the apache-kafka provider's connection type: its extra is librdkafka's config
KAFKA_TYPE = "streamfill_kafka"  # streamfill's own types, with form fields (orchestration/provider.py)
SCHEMA_REGISTRY_TYPE = "streamfill_schema_registry"


def extras(conn) -> dict:
    """A connection's extras by their field names: a form of an older Airflow UI saves a field of a provider's
    type as `extra__<type>__<field>`."""
    prefix = f"extra__{getattr(conn, 'conn_type', None)}__"
    return {k.removeprefix(prefix): v for k, v in (conn.extra_dejson or {}).items()}


def kafka_client(conn) -> dict[str, str]:
    """librdkafka settings of an Airflow Connection (secrets included: for a client or a job's environment)."""
    extra, as_is = extras(conn), getattr(conn, "conn_type", None) == PROVIDER_KAFKA_TYPE
    name = getattr(conn, "conn_id", None) or KAFKA_CONNECTION  # an entry's or an operator's kafka_conn_id
    if as_is:
        conf = {str(k): property_value(v) for k, v in extra.items()}
        if not conf.get("bootstrap.servers"):
            raise OptionError(f"extra of connection {name}", None, "has no bootstrap.servers (a "
                              "connection of type kafka holds librdkafka's configuration in its extra)",
                              'Add "bootstrap.servers": "host:9092" to the extra (Admin > Connections)')
    else:
        conf = {"bootstrap.servers": str(extra.get("bootstrap_servers") or f"{conn.host}:{conn.port or 9092}")}
        for field, prop in CLIENT_FIELDS.items():
            if field != "bootstrap_servers" and extra.get(field) not in (None, ""):
                conf[prop] = str(extra[field])
    if conn.login and "sasl.username" not in conf:
        conf["sasl.username"] = conn.login
    if conn.password and "sasl.password" not in conf:
        conf["sasl.password"] = conn.password
    for field, known in (("security_protocol", SECURITY_PROTOCOLS), ("sasl_mechanism", SASL_MECHANISMS)):
        prop = CLIENT_FIELDS[field]
        if prop in conf:
            if conf[prop].upper() not in known:
                key = prop if as_is else field
                raise OptionError(f"extra {key} of connection {name}", conf[prop],
                                  f"is not one of {', '.join(known)}", "Fix the connection (Admin > Connections)")
            conf[prop] = conf[prop].upper()
    return conf


def kafka_connection(conf: Mapping[str, str]) -> dict:
    """The connection (as AIRFLOW_CONN_* JSON takes it) for librdkafka settings `conf`."""
    by_prop = {prop: field for field, prop in CLIENT_FIELDS.items()}
    out: dict = {"conn_type": KAFKA_TYPE, "extra": {}}
    for prop, value in conf.items():
        if prop in _FROM_LOGIN:
            out[_FROM_LOGIN[prop]] = value
        elif prop in by_prop:
            out["extra"][by_prop[prop]] = value
    return out


def schema_registry_client(conn) -> dict[str, str]:
    """The registry's client settings (SchemaRegistryClient's names) from its Airflow connection."""
    url = extras(conn).get("url") or (conn.host if "://" in (conn.host or "") else
                                           f"http://{conn.host}:{conn.port or 8081}")
    conf = {"url": url}
    if conn.login:
        conf["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
    return conf


def schema_registry_env(conf: Mapping[str, str]) -> dict[str, str]:
    """The STREAMFILL_SCHEMA_REGISTRY_* settings of a launched job, for the registry's client settings."""
    env = {"STREAMFILL_SCHEMA_REGISTRY_URL": conf["url"]} if conf else {}
    if conf.get("basic.auth.user.info"):
        user, password = conf["basic.auth.user.info"].split(":", 1)
        env |= {"STREAMFILL_SCHEMA_REGISTRY_USERNAME": user, "STREAMFILL_SCHEMA_REGISTRY_PASSWORD": password}
    return env


def schema_registry_connection(conf: Mapping[str, str]) -> dict:
    """The registry's connection (AIRFLOW_CONN_* JSON) for its client settings `conf`."""
    out: dict = {"conn_type": SCHEMA_REGISTRY_TYPE, "extra": {"url": conf["url"]}}
    if conf.get("basic.auth.user.info"):
        out["login"], out["password"] = conf["basic.auth.user.info"].split(":", 1)
    return out


def postgres_url(conn) -> str:
    """The SQLAlchemy URL (password included) of the Airflow connection `streamfill_postgres`, with libpq's TLS
    settings from its extras (`sslmode: verify-full`, `sslrootcert: /path/ca.pem`)."""
    from sqlalchemy import URL

    extra = conn.extra_dejson
    query = {k: str(extra[k]) for k in PG_TLS_EXTRAS if extra.get(k)}
    return URL.create("postgresql+psycopg2", username=conn.login or None, password=conn.password or None,
                      host=conn.host, port=conn.port, database=conn.schema, query=query
                      ).render_as_string(hide_password=False)


def postgres_connection(url: str) -> dict:
    """The connection (AIRFLOW_CONN_* JSON) for a SQLAlchemy URL, its TLS query as extras."""
    from sqlalchemy import make_url

    db = make_url(url)
    out = {"conn_type": "postgres", "host": db.host, "port": db.port or 5432, "schema": db.database,
           "login": db.username, "password": db.password,
           "extra": {k: v for k, v in db.query.items() if k in PG_TLS_EXTRAS}}
    return {k: v for k, v in out.items() if v not in (None, {})}


def api_base(conn) -> str:
    """The base URL of Airflow's API from its connection: the host as a URL, or host and port."""
    return conn.host if "://" in (conn.host or "") else f"http://{conn.host}:{conn.port or 8080}"

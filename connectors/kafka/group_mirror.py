"""commitToGroup's Kafka client: the job's committed offsets mirrored into a consumer group for lag tools.

Two processes build it. The launch keeps in offsets_db what names the cluster and the user, never a secret. The
process that commits each batch adds the secrets from its own STREAMFILL_KAFKA_* settings, where every streamfill
client finds them (streamfill's launches and Airflow's tasks set them, from the Airflow connection), and only
when those settings name the same cluster and user: a secret never goes to another cluster or with another name.
Both processes are the driver's, with one environment, so the launch can tell beforehand whether the mirror
will log in as its read does, and is refused when it would not.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.source_declarations import COMMIT_TO_GROUP
from streamfill.errors import OptionError
from streamfill.kafka_client import KAFKA_CONNECTION, describe, is_secret, settings_env
from streamfill.partitions import TopicPartition
from streamfill.settings import get_settings

# whom a secret belongs to: the cluster, and the principal (its SASL user, its OIDC client, or its certificate and
# key)
OWNER = ("bootstrap.servers", "sasl.username", "sasl.oauthbearer.client.id", "ssl.certificate.location",
         "ssl.key.location")
TIMEOUT_S = 10.0  # the batch is committed by then: a mirror that cannot reach the cluster gives up, not the stream

BROKERS_KEPT = 4  # mirror clients a committing process keeps; past that the least recently used is dropped
_brokers: OrderedDict[frozenset, Broker] = OrderedDict()  # kept for the next batch once it worked


def kept(kafka: Mapping[str, str]) -> dict[str, str]:
    """What offsets_db keeps of the read's client for the mirror: every setting but the secrets."""
    return {k: v for k, v in kafka.items() if not is_secret(k)}


def client(stored: Mapping[str, str], settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The mirror's client in this process: the stored settings, with the secrets of this process's settings
    (`settings`: its STREAMFILL_KAFKA_* client) when those name the same cluster and user."""
    settings = get_settings().kafka_client() if settings is None else settings
    if not _same_owner(stored, settings):
        return dict(stored)
    return {**stored, **{k: v for k, v in settings.items() if is_secret(k)}}


def _same_owner(one: Mapping[str, str], other: Mapping[str, str]) -> bool:
    def owner(conf: Mapping[str, str]) -> tuple:
        servers = frozenset(s.strip() for s in conf.get("bootstrap.servers", "").split(",") if s.strip())
        return (servers, *(conf.get(p) for p in OWNER[1:]))
    return owner(one) == owner(other)


def check(group: str, kafka: Mapping[str, str]) -> None:
    """At the launch: refuse commitToGroup when the committing process's client would lack a secret the read's
    client `kafka` has (OptionError naming the settings to set), or when its user may not commit the group, or
    the group has live members (BrokerError)."""
    settings = get_settings().kafka_client()
    mirror = client(kept(kafka), settings)
    lacking = sorted(k for k, v in kafka.items() if is_secret(k) and mirror.get(k) != v)
    if lacking:
        raise _not_carried(group, lacking, kafka, settings)
    Broker(mirror, TIMEOUT_S).require_group(group)


def _not_carried(group: str, lacking: list[str], kafka: Mapping[str, str], settings: Mapping[str, str]) -> OptionError:
    names = ", ".join(f"kafka.{k}" for k in lacking)
    if not _same_owner(kafka, settings):
        why = f"they name {describe(settings)}, not this read's {describe(kafka)}"
    elif any(k in settings for k in lacking):
        why = f"they give another {names} than this read's"
    else:
        why = f"they give no {names}"
    variables = ", ".join(settings_env(dict.fromkeys(lacking, "")))
    wanted = f"{variables} and the cluster's other" if variables else "the cluster's"
    fix = (f"Set {wanted} STREAMFILL_KAFKA_* settings in the environment the Spark driver starts with (streamfill's "
           f"launches and Airflow's tasks set them from the Airflow connection {KAFKA_CONNECTION}), or leave "
           "commitToGroup out")
    fieldless = [f"kafka.{k}" for k in lacking if not settings_env({k: ""})]
    if fieldless:
        fix = (f"streamfill's settings have no field for {', '.join(fieldless)}: give the client's key as PEM files "
               "(STREAMFILL_KAFKA_SSL_CERTIFICATE_LOCATION, STREAMFILL_KAFKA_SSL_KEY_LOCATION and "
               "STREAMFILL_KAFKA_SSL_KEY_PASSWORD). " + fix)
    return OptionError(COMMIT_TO_GROUP.key, group, f"needs {names} in the process that commits each batch, which takes "
                       "Kafka secrets from its STREAMFILL_KAFKA_* settings alone (never from offsets_db or the "
                       f"query's options), and {why}", fix)


def commit(stored: Mapping[str, str], group: str, positions: Mapping[TopicPartition, int]) -> None:
    """Set the group's committed offsets to `positions` with this process's mirror client."""
    conf = client(stored)
    key = frozenset(conf.items())
    broker = _brokers.pop(key, None) or Broker(conf, TIMEOUT_S)
    broker.commit_group(group, positions)
    _brokers[key] = broker
    while len(_brokers) > BROKERS_KEPT:
        _brokers.popitem(last=False)

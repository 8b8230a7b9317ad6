"""A cluster's client settings as librdkafka takes them, from Spark's Kafka option names; and the broker's
refusals (a wrong password, an untrusted certificate, a missing ACL) in words that say what to set.

Spark's Kafka source hands `kafka.*` options to the Java client. librdkafka shares most names; the ones it does
not share are translated here: `sasl.jaas.config` (PlainLoginModule and ScramLoginModule) becomes
`sasl.username` / `sasl.password`, PEM trust and key stores become `ssl.ca.location` / `ssl.certificate.location`
/ `ssl.key.location`, and a PKCS#12 key store passes as it is. A Java key store (JKS) cannot be read by
librdkafka: the error says how to export it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from streamfill.errors import OptionError
from streamfill.kafka_client import (
    OIDC_PROPERTIES,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    UNSECURED_JWT,
    UNSUPPORTED_MECHANISMS,
    describe,
    setting_names,
)

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\s*(?P<opts>.*?)\s*;?\s*$",
                   re.DOTALL)
_JAAS_OPTION = re.compile(r'(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')
_LOGIN_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                  "org.apache.kafka.common.security.scram.ScramLoginModule")
_EXPORT_CA = ("librdkafka reads CA certificates as PEM: export them, e.g. `keytool -exportcert -rfc -keystore "
              "truststore.jks -alias CARoot > ca.pem`, and set kafka.ssl.ca.location to that file")


def client_config(kafka: Mapping[str, str]) -> dict[str, str]:
    """`kafka` (option names without the `kafka.` prefix) as librdkafka configuration; raises OptionError naming
    the option, the value and the fix."""
    conf = {k.lower(): str(v) for k, v in kafka.items()}
    if "security.protocol" in conf:
        conf["security.protocol"] = _one_of(conf["security.protocol"], SECURITY_PROTOCOLS, "security.protocol")
    for key in ("sasl.mechanism", "sasl.mechanisms"):
        if key in conf:
            conf["sasl.mechanism"] = _mechanism(conf.pop(key), key)
    if conf.get("security.protocol", "").startswith("SASL") and "sasl.mechanism" not in conf \
            and "sasl.jaas.config" not in conf:
        raise OptionError("kafka.sasl.mechanism", None, f"is not set for {conf['security.protocol']}, and "
                          "librdkafka would then use GSSAPI (Kerberos), which streamfill does not support",
                          f"Set it to one of {', '.join(SASL_MECHANISMS)}")
    if conf.get("sasl.mechanism") == "OAUTHBEARER":
        _token_source(conf)
    if "sasl.jaas.config" in conf:
        _from_jaas(conf, conf.pop("sasl.jaas.config"))
    _trust_store(conf)
    _key_store(conf)
    if conf.get("ssl.endpoint.identification.algorithm") == "":
        conf["ssl.endpoint.identification.algorithm"] = "none"  # Java's empty value: no host name check
    return conf


def _token_source(conf: dict[str, str]) -> None:
    """OAUTHBEARER gets its tokens from an OIDC provider (client credentials) or, on a test broker, unsecured."""
    if conf.get(UNSECURED_JWT, "").lower() == "true":
        return
    if conf.get("sasl.oauthbearer.method", "").lower() != "oidc":
        oidc = ", ".join(f"kafka.{p}" for p in OIDC_PROPERTIES)
        raise OptionError("kafka.sasl.oauthbearer.method", conf.get("sasl.oauthbearer.method"),
                          "is not oidc, and OAUTHBEARER needs a source of tokens",
                          f"Set kafka.sasl.oauthbearer.method=oidc with {oidc} (on a test broker with Kafka's "
                          f"unsecured validator: kafka.{UNSECURED_JWT}=true)")
    missing = [p for p in OIDC_PROPERTIES if not conf.get(p)]
    if missing:
        raise OptionError(f"kafka.{missing[0]}", None, "is required with sasl.oauthbearer.method=oidc",
                          f"Set {', '.join(f'kafka.{p}' for p in missing)} (the client credentials the identity "
                          "provider gave this job, and its token endpoint)")


def _mechanism(value: str, key: str) -> str:
    if value.upper() in UNSUPPORTED_MECHANISMS:
        raise OptionError(f"kafka.{key}", value, "is not supported: streamfill authenticates to Kafka with "
                          f"{', '.join(SASL_MECHANISMS)} over SASL, or a client certificate over SSL",
                          "Use one of those (docs/connectors.md, \"Your Kafka\"); a cluster that accepts only "
                          "Kerberos cannot be read by this version")
    return _one_of(value, SASL_MECHANISMS, key)


def _one_of(value: str, known: tuple[str, ...], key: str) -> str:
    if value.upper() not in known:
        raise OptionError(f"kafka.{key}", value, f"is not one of {', '.join(known)}",
                          f"Set it to one of {', '.join(known)}")
    return value.upper()


def _from_jaas(conf: dict[str, str], jaas: str) -> None:
    """A JAAS line of PlainLoginModule or ScramLoginModule -> sasl.username and sasl.password."""
    shown = "<the login line, not shown: it holds a password>"
    found = _JAAS.match(jaas)
    if not found or found["module"] not in _LOGIN_MODULES:
        module = found["module"] if found else "no login module"
        raise OptionError("kafka.sasl.jaas.config", shown, f"names {module}; only PlainLoginModule and "
                          "ScramLoginModule lines translate to librdkafka", "Give kafka.sasl.username and "
                          "kafka.sasl.password instead")
    options = {m["key"]: (m["quoted"] if m["quoted"] is not None else m["bare"])
               for m in _JAAS_OPTION.finditer(found["opts"])}
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in options.items()}
    for key in ("username", "password"):
        if key not in options:
            raise OptionError("kafka.sasl.jaas.config", shown, f"has no {key}=\"...\"",
                              f'Write it as {found["module"]} required username="NAME" password="SECRET";')
        given = conf.get(f"sasl.{key}")
        if given is not None and given != options[key]:
            raise OptionError(f"kafka.sasl.{key}", "<given>", "differs from the one in kafka.sasl.jaas.config",
                              "Give the credentials once: either the JAAS line or sasl.username/sasl.password")
        conf[f"sasl.{key}"] = options[key]


def _store_type(conf: dict[str, str], prefix: str, inline: Mapping[str, str]) -> str | None:
    """The type of the trust or key store `prefix` names, after its inline PEM options (`inline`: Java's name ->
    librdkafka's) moved to librdkafka's names; None when it has no location (its type option is dropped)."""
    for java, librdkafka in inline.items():
        if java in conf:
            conf[librdkafka] = conf.pop(java)
    if f"{prefix}.location" not in conf:
        conf.pop(f"{prefix}.type", None)
        return None
    location = conf[f"{prefix}.location"]
    default = "PEM" if location.lower().endswith((".pem", ".crt")) else "JKS"
    return conf.pop(f"{prefix}.type", default).upper()


def _trust_store(conf: dict[str, str]) -> None:
    kind = _store_type(conf, "ssl.truststore", {"ssl.truststore.certificates": "ssl.ca.pem"})
    if kind is None:
        return
    if kind != "PEM":
        raise OptionError("kafka.ssl.truststore.location", conf["ssl.truststore.location"],
                          f"is a {kind} trust store", _EXPORT_CA)
    conf["ssl.ca.location"] = conf.pop("ssl.truststore.location")
    conf.pop("ssl.truststore.password", None)  # a PEM trust store has none


def _key_store(conf: dict[str, str]) -> None:
    kind = _store_type(conf, "ssl.keystore", {"ssl.keystore.certificate.chain": "ssl.certificate.pem",
                                              "ssl.keystore.key": "ssl.key.pem"})
    if kind is None:
        return
    if kind == "PKCS12":
        return  # librdkafka reads ssl.keystore.location and ssl.keystore.password itself
    if kind != "PEM":
        raise OptionError("kafka.ssl.keystore.location", conf["ssl.keystore.location"], f"is a {kind} key store",
                          "librdkafka reads PKCS#12 or PEM: convert it (`keytool -importkeystore -deststoretype "
                          "PKCS12 ...`) and set kafka.ssl.keystore.type, or give kafka.ssl.certificate.location and "
                          "kafka.ssl.key.location")
    location = conf.pop("ssl.keystore.location")
    conf.setdefault("ssl.certificate.location", location)
    conf.setdefault("ssl.key.location", location)


def refusal(conf: Mapping[str, str], error: str) -> str | None:
    """The broker's or the TLS layer's refusal of this client, as a message with its fix; None when `error` is
    not a refusal of the client's credentials or trust (an outage, say)."""
    text = error.lower()
    where = describe(conf)
    if "authentication failed" in text or "sasl authentication error" in text or "invalid credentials" in text:
        return (f"authentication failed on {where}: {error}. Check the user name and password ("
                f"{setting_names('sasl.username')}; {setting_names('sasl.password')})")
    if "certificate verify failed" in text or "certificate could not be verified" in text:
        return (f"the broker's certificate is not trusted by this client on {where}: {error}. Set "
                f"{setting_names('ssl.ca.location')} to the PEM file of the CA that signed it")
    if "ssl handshake failed" in text or "connecting to a ssl listener" in text or "wrong version number" in text:
        return (f"the TLS handshake failed on {where}: {error}. Check that the listener speaks the protocol set in "
                f"{setting_names('security.protocol')}")
    if "unsupported sasl mechanism" in text or ("sasl mechanism" in text and "not supported" in text):
        return (f"the listener refuses the SASL mechanism on {where}: {error}. Set "
                f"{setting_names('sasl.mechanism')} to one the listener enables")
    return None


_ACL_RESOURCES = {"topic": "--topic", "consumer group": "--group"}  # what we name -> kafka-acls.sh's flag


def not_authorized(conf: Mapping[str, str], name: str, operation: str, resource: str = "topic") -> str:
    """A topic (or consumer group) this client's user may not use: which one, which ACL operation is missing, how
    to grant it."""
    user = conf.get("sasl.username") or "this client's principal"
    return (f"user {user} may not {operation} {resource} {name!r} on {describe(conf)}: no ACL allows "
            f"{operation.upper()} on it. Ask the cluster's admin for one, e.g. `kafka-acls.sh --add "
            f"--allow-principal User:{user} --operation {operation.title()} {_ACL_RESOURCES[resource]} {name}`")

"""kafka-python settings from the ``kafka.*`` options given to Spark's Kafka source.

The lag poller must reach the same cluster, as the same principal, as the job's reader;
so it takes its security settings from the one place the operator writes them. Options
are Java client names; kafka-python spells and stores some differently:

* ``security.protocol``, ``sasl.mechanism``, ``sasl.kerberos.service.name`` map directly;
* ``sasl.jaas.config`` of the PLAIN and SCRAM login modules gives the user name and
  password (GSSAPI uses the process's Kerberos credentials);
* ``sasl.mechanism=OAUTHBEARER`` gives a token provider (:mod:`streaming.cluster.oauth`) built from
  ``sasl.jaas.config``, ``sasl.login.callback.handler.class`` and
  ``sasl.oauthbearer.token.endpoint.url``: Kafka's unsecured tokens or OIDC client credentials;
* ``sasl.mechanism=AWS_MSK_IAM`` (Amazon MSK's ``IAMLoginModule``) is kafka-python's own
  AWS_MSK_IAM mechanism, which signs with botocore's default credentials;
* TLS files must be PEM (``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``, which Java
  clients read as well since Kafka 2.7): Python's ssl module cannot read JKS or PKCS12
  stores, so those are refused with a message saying what to do rather than failing at
  the first connection;
* ``ssl.endpoint.identification.algorithm`` empty turns host name checking off.

No option value is ever logged or put in an error message: passwords live there.

The mapping, Java option -> kafka-python setting:

=========================================  =====================================================
``security.protocol``                      ``security_protocol``
``sasl.mechanism``                         ``sasl_mechanism``
``sasl.kerberos.service.name``             ``sasl_kerberos_service_name``
``sasl.jaas.config`` (PLAIN, SCRAM)        ``sasl_plain_username``, ``sasl_plain_password``
``sasl.jaas.config`` (OAUTHBEARER)         ``sasl_oauth_token_provider``
``ssl.truststore.location`` (PEM)          ``ssl_cafile``
``ssl.keystore.location`` (PEM)            ``ssl_certfile`` and ``ssl_keyfile``
``ssl.key.password``                       ``ssl_password``
``ssl.endpoint.identification.algorithm``  ``ssl_check_hostname`` (empty: False)
=========================================  =====================================================

:func:`check_access` is the job's pre-flight: kafka-python retries a refused login until
its bootstrap times out and Spark's source keeps retrying too, so a wrong password would
otherwise show as a job that never makes progress. It also refuses, naming the package, a
mechanism whose Python library is not installed (``gssapi`` for GSSAPI, ``botocore`` for
AWS_MSK_IAM), and gets an OAUTHBEARER token first, so that a token endpoint refusing the
client's credentials is named as such.
"""

from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_DIRECT = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.key.password": "ssl_password",
}
# Option names are words; dotted ones (ssl.truststore.location) configure an OAuth token endpoint's TLS.
_JAAS_OPTION = re.compile(r'([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
_PASSWORD_MODULES = ("PlainLoginModule", "ScramLoginModule")
_REFUSED = ("ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key")


class UnsupportedKafkaOption(ValueError):
    """A ``kafka.*`` option the poller cannot honour in kafka-python."""


def client_config_from_kafka_options(kafka_options: dict[str, str]) -> dict[str, Any]:
    """kafka-python client settings equivalent to the ``kafka.*`` security options.

    Options that only tune the Java client (buffer sizes, timeouts) are not carried over;
    security options that cannot be carried over raise :class:`UnsupportedKafkaOption`.
    """
    options = {name.removeprefix("kafka."): value for name, value in kafka_options.items()}
    config: dict[str, Any] = {kafka_python: options[java] for java, kafka_python in _DIRECT.items()
                              if java in options}
    for name in _REFUSED:
        if name in options:
            raise UnsupportedKafkaOption(f"kafka.{name}: inline PEM is not supported by the lag poller; "
                                         "give the PEM file's path in the matching .location option")
    if "sasl.jaas.config" in options:
        config.update(_jaas_credentials(options["sasl.jaas.config"]))
    mechanism = config.get("sasl_mechanism", "").upper()
    if mechanism == "OAUTHBEARER":
        from streaming.cluster.oauth import token_provider

        config["sasl_mechanism"] = mechanism
        config["sasl_oauth_token_provider"] = token_provider(options)
    elif mechanism == "AWS_MSK_IAM":
        config["sasl_mechanism"] = mechanism
        _check_msk_iam(options)
    if "ssl.truststore.location" in options:
        _require_pem(options, "truststore")
        config["ssl_cafile"] = options["ssl.truststore.location"]
    if "ssl.keystore.location" in options:
        # A PEM key store holds the private key and its certificate chain in one file.
        _require_pem(options, "keystore")
        config["ssl_certfile"] = options["ssl.keystore.location"]
        config["ssl_keyfile"] = options["ssl.keystore.location"]
    if "ssl.endpoint.identification.algorithm" in options:
        config["ssl_check_hostname"] = options["ssl.endpoint.identification.algorithm"].strip() != ""
    return config


def jaas_options(jaas: str) -> tuple[str, dict[str, str]]:
    """The login module's class name and its options, unquoted, of a ``sasl.jaas.config`` value."""
    module = jaas.strip().split(None, 1)[0] if jaas.strip() else ""
    unescape = re.compile(r"\\(.)")
    return module, {m.group(1): unescape.sub(r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
                    for m in _JAAS_OPTION.finditer(jaas.strip()[len(module):])}


def _jaas_credentials(jaas: str) -> dict[str, str]:
    module, values = jaas_options(jaas)
    if not module.endswith(_PASSWORD_MODULES):
        return {}  # e.g. Kerberos: kafka-python uses the process's ticket cache or keytab
    if "username" not in values or "password" not in values:
        raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: {module.rsplit('.', 1)[-1]} without "
                                     "username and password")
    return {"sasl_plain_username": values["username"], "sasl_plain_password": values["password"]}


MSK_IAM_MODULE = "software.amazon.msk.auth.iam.IAMLoginModule"
# IAMLoginModule options naming another principal than botocore's default credentials would find.
_MSK_OTHER_PRINCIPAL = ("awsProfileName", "awsRoleArn", "awsRoleSessionName", "awsStsRegion",
                        "awsRoleAccessKeyId", "awsRoleSecretAccessKey", "awsRoleSessionToken")


def _check_msk_iam(options: Mapping[str, str]) -> None:
    """AWS_MSK_IAM as kafka-python does it: over TLS, as the principal of botocore's default credential chain."""
    if options.get("security.protocol", "").upper() != "SASL_SSL":
        raise UnsupportedKafkaOption("kafka.sasl.mechanism=AWS_MSK_IAM needs kafka.security.protocol=SASL_SSL")
    module, values = jaas_options(options.get("sasl.jaas.config", ""))
    if module and module != MSK_IAM_MODULE:
        raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: sasl.mechanism=AWS_MSK_IAM takes {MSK_IAM_MODULE}, "
                                     f"not {module.rsplit('.', 1)[-1]}")
    other = [name for name in _MSK_OTHER_PRINCIPAL if name in values]
    if other:
        raise UnsupportedKafkaOption(
            f"kafka.sasl.jaas.config: {', '.join(other)} in {MSK_IAM_MODULE}: the job's own clients (kafka-python) "
            "sign with botocore's default credentials only (AWS_PROFILE, AWS_ACCESS_KEY_ID..., the web identity "
            "token, the instance or task role); give the JVM the same principal, without these options")


def _require_pem(options: dict[str, str], store: str) -> None:
    kind = options.get(f"ssl.{store}.type", "JKS").strip().upper()
    if kind != "PEM":
        raise UnsupportedKafkaOption(
            f"kafka.ssl.{store}.type={kind}: the lag poller (kafka-python) reads PEM files only; convert the "
            f"{store} (keytool -importkeystore to PKCS12, then openssl pkcs12 -nodes to PEM) and set "
            f"kafka.ssl.{store}.type=PEM, which Spark's Kafka source reads too")


class KafkaAccessError(RuntimeError):
    """The cluster refused the job's credentials or TLS settings: retrying cannot help."""


_SECRET_SETTINGS = ("sasl_plain_password", "ssl_password")
# What each SASL mechanism needs installed in Python beyond kafka-python.
_MECHANISM_PACKAGES = {"GSSAPI": ("gssapi", "pip install gssapi (it builds against the system's Kerberos "
                                            "library: Debian's libkrb5-dev, gcc and krb5-user)"),
                       "AWS_MSK_IAM": ("botocore", "pip install botocore")}
_CLOSED_LOGINS = 3  # connections closed by the broker mid-login before that counts as a refusal
_SECRET_OPTION = re.compile(r"password|secret|jaas|token", re.IGNORECASE)


# Options named like secrets that hold none: the token endpoint's address is what its errors must name
# (unless it carries credentials itself).
_PUBLIC_OPTIONS = ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.jwks.endpoint.url")
# JAAS options that are names, switches or paths, not secrets: redacting them would blank every mention
# of a user, scope or client in the job's output. Any other JAAS value (password, clientSecret, an
# extension, an unknown module's option) counts as a secret.
_PUBLIC_JAAS_OPTIONS = {"username", "clientid", "scope", "principal", "servicename", "usekeytab", "keytab",
                        "storekey", "useticketcache", "debug", "tokenauth", "ssl.truststore.location",
                        "ssl.truststore.type", "ssl.endpoint.identification.algorithm", "awsprofilename",
                        "awsrolearn", "awsrolesessionname", "awsstsregion", "awsdebugcreds"}
_PUBLIC_JAAS_PREFIX = "unsecuredlogin"  # Kafka's unsecured tokens: claims and lifetimes, unsigned by design


def secret_values(kafka_options: Mapping[str, str]) -> list[str]:
    """Values that must never be printed: passwords, secrets, tokens and JAAS configurations,
    and the secrets inside those configurations (longest first, so redaction is whole)."""
    found = {value for name, value in kafka_options.items() if _SECRET_OPTION.search(name) and value
             and (name.removeprefix("kafka.") not in _PUBLIC_OPTIONS or "@" in value)}
    for name, value in kafka_options.items():
        if name.removeprefix("kafka.") == "sasl.jaas.config":
            found.update(v for m in _JAAS_OPTION.finditer(value)
                         if m.group(1).lower() not in _PUBLIC_JAAS_OPTIONS
                         and not m.group(1).lower().startswith(_PUBLIC_JAAS_PREFIX)
                         for v in [m.group(2) if m.group(2) is not None else m.group(3)] if v)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def check_access(bootstrap_servers: str, client_config: Mapping[str, Any], topic: str,
                 timeout_s: float = 10.0) -> bool:
    """Bootstrap and read ``topic``'s metadata as the job will; False if no broker answered.

    Raises :class:`KafkaAccessError` (naming the cause: authentication, TLS or authorization)
    when the cluster refused the settings; an unreachable cluster is left to the job's own
    retries, since brokers come back but a wrong password does not.
    """
    from kafka import KafkaAdminClient
    from kafka import errors as Errors

    secrets = [str(client_config[k]) for k in _SECRET_SETTINGS if client_config.get(k)]
    check_mechanism_support(client_config)
    provider = client_config.get("sasl_oauth_token_provider")
    if provider is not None:
        secrets.extend(provider.secrets())
        if not _first_token(provider, bootstrap_servers, secrets):
            return False
    with _client_errors() as seen:
        try:
            # Retries at least every second: each refused attempt is one more chance to hear why.
            admin = KafkaAdminClient(**{"bootstrap_servers": bootstrap_servers,
                                        "client_id": "rebalance-monitor-preflight",
                                        "bootstrap_timeout_ms": int(timeout_s * 1000),
                                        "request_timeout_ms": int(timeout_s * 1000),
                                        "reconnect_backoff_max_ms": 1000, **client_config})
        except Errors.KafkaTimeoutError as exc:
            seen.append(exc)
            admin = None
    if admin is not None:
        try:
            described = admin.describe_topics([topic])
        finally:
            admin.close()
        # An error per topic, not an exception: 3 (unknown) until the first group creates the offsets
        # topic, which the source waits for; 29 when the principal may not describe it.
        code = next((t.get("error_code", 0) for t in described if t.get("name") == topic), 3)
        if issubclass(Errors.for_code(code), Errors.AuthorizationError):
            raise KafkaAccessError(f"Kafka at {bootstrap_servers}: authorization failed, the job's principal may "
                                   f"not describe topic {topic!r} (ACL operation Describe)")
        if code == 0:
            _check_read(bootstrap_servers, client_config, topic, secrets)
        return True
    cause = _refusal(seen, str(client_config.get("security_protocol", "")).upper().startswith("SASL"))
    if cause is not None:
        raise KafkaAccessError(redact(f"Kafka at {bootstrap_servers} refused the job's settings: {cause}", secrets))
    log.warning("no broker at %s answered within %.0fs; the job starts and keeps retrying", bootstrap_servers,
                timeout_s)
    return False


def check_mechanism_support(client_config: Mapping[str, Any]) -> None:
    """Raise :class:`UnsupportedKafkaOption` naming the package when the SASL mechanism's Python library is
    missing: kafka-python would only fail at each connection, which the pre-flight takes for a broker away."""
    import importlib.util

    mechanism = str(client_config.get("sasl_mechanism") or "").upper()
    needed = _MECHANISM_PACKAGES.get(mechanism)
    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        raise UnsupportedKafkaOption(f"kafka.sasl.mechanism={mechanism}: the job's own clients (kafka-python) need "
                                     f"the Python package {needed[0]!r}, which is not installed: {needed[1]}")


def _first_token(provider: Any, bootstrap_servers: str, secrets: list[str]) -> bool:
    """Get an OAUTHBEARER token before any connection: False if the token endpoint could not be reached
    (it may come back), :class:`KafkaAccessError` if it refused the client's credentials."""
    from streaming.cluster.oauth import TokenError

    try:
        provider.token()
    except TokenError as exc:
        if exc.refused:
            raise KafkaAccessError(redact(f"Kafka at {bootstrap_servers}: no OAUTHBEARER token: {exc}", secrets)) \
                from None
        log.warning("%s; the job starts and keeps retrying", redact(f"no OAUTHBEARER token yet: {exc}", secrets))
        return False
    return True


def _check_read(bootstrap_servers: str, client_config: Mapping[str, Any], topic: str, secrets: list[str],
                window_s: float = 1.0) -> None:
    """Fetch at the end of ``topic``'s partition 0 for ``window_s``, as Spark's source will fetch: without
    Read on the topic the broker refuses it, which Spark's source would only report after Spark started
    and then retry for --query-retry-seconds. No consumer group: nothing is committed."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka import errors as Errors

    consumer = consumer_without_topic_creation(**{
        "bootstrap_servers": bootstrap_servers, "client_id": "rebalance-monitor-preflight", "group_id": None,
        "enable_auto_commit": False, "fetch_max_wait_ms": 100, **client_config})
    try:
        partition = KafkaTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_end(partition)
        deadline = time.monotonic() + window_s
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
    except Errors.AuthorizationError as exc:
        raise KafkaAccessError(redact(f"Kafka at {bootstrap_servers}: authorization failed, the job's principal "
                                      f"may not read topic {topic!r} (ACL operation Read; {exc})", secrets)) from None
    finally:
        consumer.close()


def _refusal(errors: list[BaseException], sasl: bool) -> str | None:
    """What in the client's errors says the settings are wrong rather than the brokers away."""
    from kafka import errors as Errors

    from streaming.cluster.oauth import TokenError

    for exc in (link for error in errors for link in _chain(error)):
        if isinstance(exc, TokenError) and exc.refused:
            return f"no OAUTHBEARER token: {exc}"
        if isinstance(exc, Errors.SaslAuthenticationFailedError):
            return f"authentication failed (SASL): {exc}; check kafka.sasl.jaas.config and kafka.sasl.mechanism"
        if isinstance(exc, Errors.AuthorizationError):
            return f"authorization failed: {exc}"
        if isinstance(exc, ssl.SSLError):
            return (f"TLS handshake failed: {exc}; check kafka.ssl.truststore.location (the CA that signed "
                    "the brokers' certificates) and kafka.ssl.endpoint.identification.algorithm")
    connection_errors = list({id(exc): exc for exc in errors if isinstance(exc, Errors.KafkaConnectionError)}.values())
    if (sasl and len(connection_errors) >= _CLOSED_LOGINS
            and all("socket disconnected" in str(exc) for exc in connection_errors)):
        # The broker answers a refused login and closes the connection; kafka-python often takes
        # the close before the answer (seen on every attempt of a run under load). A broker that
        # is down refuses the connection instead, and one that accepts the login keeps it open.
        return (f"authentication failed (SASL): the broker closed all {len(connection_errors)} connections "
                "during the login, as it does after refusing credentials; check kafka.sasl.jaas.config and "
                "kafka.sasl.mechanism")
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (kafka-python wraps TLS errors)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


@contextmanager
def _client_errors() -> Iterator[list[BaseException]]:
    """Exceptions kafka-python reports while it retries: its bootstrap gives up with a bare
    timeout, and the cause (a refused login, a failed handshake) is only in what it logs."""
    seen: list[BaseException] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            args = record.args if isinstance(record.args, tuple) else ()
            seen.extend(a for a in args if isinstance(a, BaseException))
            if record.exc_info and record.exc_info[1] is not None:
                seen.append(record.exc_info[1])

    handler = Collect()
    client_log = logging.getLogger("kafka")
    level, propagate = client_log.level, client_log.propagate
    if client_log.getEffectiveLevel() > logging.WARNING:
        # Logging configured quieter: hear the client's warnings, still print none of them.
        client_log.setLevel(logging.WARNING)
        client_log.propagate = False
    client_log.addHandler(handler)
    try:
        yield seen
    finally:
        client_log.removeHandler(handler)
        client_log.setLevel(level)
        client_log.propagate = propagate


def forbid_topic_creation(client: Any) -> Any:
    """``client`` (a kafka-python consumer or producer) with topic auto-creation off, returned.

    kafka-python 3.0 accepts ``allow_auto_create_topics=False`` but never hands it to the
    client's cluster metadata, whose own default asks the broker to create every topic it
    requests metadata for: on a cluster with ``auto.create.topics.enable`` (Kafka's default),
    looking up a topic just deleted would create it again, empty."""
    cluster = getattr(client, "_cluster", None) or getattr(client, "_metadata", None)
    if cluster is None or not isinstance(getattr(cluster, "config", None), dict):
        raise TypeError(f"{type(client).__name__}: no cluster metadata to turn topic auto-creation off in")
    cluster.config["allow_auto_create_topics"] = False
    return client


def consumer_without_topic_creation(**config: Any) -> Any:
    """A KafkaConsumer that never creates a topic (see :func:`forbid_topic_creation`)."""
    from kafka import KafkaConsumer

    return forbid_topic_creation(KafkaConsumer(**{**config, "allow_auto_create_topics": False}))


class LazyClient:
    """A kafka-python client made at its first use and closed quietly: construction does no I/O, a
    failed client is dropped (:meth:`close`) and made afresh at the next use."""

    def __init__(self, factory: Callable[..., Any], config: Mapping[str, Any], what: str) -> None:
        self._factory = factory
        self._config = dict(config)
        self._what = what
        self._client: Any = None

    def get(self) -> Any:
        if self._client is None:
            self._client = self._factory(**self._config)
        return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                log.debug("closing the %s failed", self._what, exc_info=True)


def config_values(answer: Mapping[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    """kafka-python's ``describe_configs`` answer as resource name -> {config name: value}, for one
    resource type (``"topic"``, ``"broker"``). kafka-python drops a resource's own error code (an
    authorization failure, an unknown topic): such a resource comes back without configs."""
    return {name: {key: entry.get("value") for key, entry in configs.items()}
            for name, configs in (answer.get(resource_type) or {}).items()}


@dataclass(frozen=True)
class DeleteRetention:
    """How long the cluster keeps a compacted topic's tombstones, and where that was read."""

    ms: int | None  # None: neither the topic's nor the broker's setting could be read
    source: str  # "topic X", "broker N" or, when ms is None, why not


def describe_delete_retention(bootstrap_servers: str, client_config: Mapping[str, Any], topic: str,
                              timeout_s: float = 10.0) -> DeleteRetention:
    """``topic``'s ``delete.retention.ms`` (DescribeConfigs on the topic: its effective value, the broker
    default included), else the broker default ``log.cleaner.delete.retention.ms`` of the broker leading
    its first partition (DescribeConfigs on the cluster). Never raises: a refusal or an unreachable
    cluster comes back as ``ms=None`` with the reason."""
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(**{"bootstrap_servers": bootstrap_servers,
                                    "client_id": "rebalance-monitor-retention",
                                    "bootstrap_timeout_ms": int(timeout_s * 1000),
                                    "request_timeout_ms": int(timeout_s * 1000), **client_config})
    except Exception as exc:
        return DeleteRetention(None, f"no broker answered ({type(exc).__name__})")
    try:
        return delete_retention(admin, topic)
    finally:
        admin.close()


def delete_retention(admin: Any, topic: str) -> DeleteRetention:
    """:func:`describe_delete_retention` over an open kafka-python admin client."""
    from kafka.admin import ConfigResource, ConfigResourceType

    reasons = []
    for kind, name, key in _retention_resources(admin, topic):
        try:
            resource = ConfigResource(getattr(ConfigResourceType, kind.upper()), name, [key])
            value = config_values(admin.describe_configs([resource], config_filter="all"), kind)
        except Exception as exc:  # refused as a whole, timed out, connection lost
            reasons.append(f"DescribeConfigs on {kind} {name} failed: {type(exc).__name__}: {exc}")
            continue
        found = value.get(name, {}).get(key)
        if found is not None:
            return DeleteRetention(int(found), f"{kind} {name}")
        reasons.append(f"DescribeConfigs on {kind} {name} gave no {key} (not authorized, or no such {kind})")
    return DeleteRetention(None, "; ".join(reasons))


def _retention_resources(admin: Any, topic: str) -> Iterator[tuple[str, str, str]]:
    """Where a tombstone's retention is read, in order: the topic, then the broker leading the topic."""
    yield "topic", topic, "delete.retention.ms"
    try:
        partitions = admin.describe_topics([topic])[0].get("partitions") or []
        leaders = sorted(p["leader"] for p in partitions if p.get("leader", -1) >= 0)
    except Exception:  # no such topic yet, or not allowed to describe it
        leaders = []
    if leaders:
        yield "broker", str(leaders[0]), "log.cleaner.delete.retention.ms"

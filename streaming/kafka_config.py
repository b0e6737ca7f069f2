"""kafka-python settings from the ``kafka.*`` options given to Spark's Kafka source.

The lag poller must reach the same cluster, as the same principal, as the job's reader;
so it takes its security settings from the one place the operator writes them. Options
are Java client names; kafka-python spells and stores some differently:

* ``security.protocol``, ``sasl.mechanism``, ``sasl.kerberos.service.name`` map directly;
* ``sasl.jaas.config`` of the PLAIN and SCRAM login modules gives the user name and
  password (GSSAPI uses the process's Kerberos credentials; OAUTHBEARER needs a token
  provider object and is refused);
* TLS files must be PEM (``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``, which Java
  clients read as well since Kafka 2.7): Python's ssl module cannot read JKS or PKCS12
  stores, so those are refused with a message saying what to do rather than failing at
  the first connection;
* ``ssl.endpoint.identification.algorithm`` empty turns host name checking off.

No option value is ever logged or put in an error message: passwords live there.
"""

from __future__ import annotations

import re
from typing import Any

_DIRECT = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.key.password": "ssl_password",
}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
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
    if config.get("sasl_mechanism", "").upper() == "OAUTHBEARER":
        raise UnsupportedKafkaOption("sasl.mechanism=OAUTHBEARER: the lag poller (kafka-python) needs a "
                                     "token provider object, which Kafka options cannot describe")
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


def _jaas_credentials(jaas: str) -> dict[str, str]:
    module = jaas.strip().split(None, 1)[0] if jaas.strip() else ""
    if not module.endswith(_PASSWORD_MODULES):
        return {}  # e.g. Kerberos: kafka-python uses the process's ticket cache or keytab
    values = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
              for m in _JAAS_OPTION.finditer(jaas[len(module):])}
    if "username" not in values or "password" not in values:
        raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: {module.rsplit('.', 1)[-1]} without "
                                     "username and password")
    unescape = re.compile(r"\\(.)")
    return {"sasl_plain_username": unescape.sub(r"\1", values["username"]),
            "sasl_plain_password": unescape.sub(r"\1", values["password"])}


def _require_pem(options: dict[str, str], store: str) -> None:
    kind = options.get(f"ssl.{store}.type", "JKS").strip().upper()
    if kind != "PEM":
        raise UnsupportedKafkaOption(
            f"kafka.ssl.{store}.type={kind}: the lag poller (kafka-python) reads PEM files only; convert the "
            f"{store} (keytool -importkeystore to PKCS12, then openssl pkcs12 -nodes to PEM) and set "
            f"kafka.ssl.{store}.type=PEM, which Spark's Kafka source reads too")

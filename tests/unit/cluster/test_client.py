"""kafka-python settings from the Spark source's ``kafka.*`` options (the lag poller's clients)."""

from __future__ import annotations

import pytest

from streaming.cluster.client import UnsupportedKafkaOption, client_config_from_kafka_options, redact, secret_values


def test_sasl_plain_and_scram_credentials():
    for module, mechanism in [("org.apache.kafka.common.security.plain.PlainLoginModule", "PLAIN"),
                              ("org.apache.kafka.common.security.scram.ScramLoginModule", "SCRAM-SHA-512")]:
        config = client_config_from_kafka_options({
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": f'{module} required username="mon itor" password="p\\"w;d=1";',
        })
        assert config == {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
                          "sasl_plain_username": "mon itor", "sasl_plain_password": 'p"w;d=1'}


def test_unquoted_jaas_values_and_kerberos():
    config = client_config_from_kafka_options({
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                  "username=alice password=secret;"})
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("alice", "secret")
    kerberos = client_config_from_kafka_options({
        "kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.kerberos.service.name": "kafka",
        "kafka.sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;'})
    assert kerberos == {"sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka"}


def test_pem_stores_and_host_name_checking():
    config = client_config_from_kafka_options({
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.ssl.keystore.type": "pem", "kafka.ssl.keystore.location": "/etc/kafka/client.pem",
        "kafka.ssl.key.password": "k", "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.fetch.max.bytes": "1048576",  # Java-client tuning: not carried over
    })
    assert config == {"security_protocol": "SSL", "ssl_cafile": "/etc/kafka/ca.pem",
                      "ssl_certfile": "/etc/kafka/client.pem", "ssl_keyfile": "/etc/kafka/client.pem",
                      "ssl_password": "k", "ssl_check_hostname": False}
    assert client_config_from_kafka_options({"kafka.ssl.endpoint.identification.algorithm": "https"}) == {
        "ssl_check_hostname": True}


def test_every_setting_produced_is_one_both_kafka_python_clients_accept():
    from kafka import KafkaAdminClient, KafkaConsumer

    config = client_config_from_kafka_options({
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI",
        "kafka.sasl.kerberos.service.name": "kafka",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="u" password="p";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": "/client.pem",
        "kafka.ssl.key.password": "k", "kafka.ssl.endpoint.identification.algorithm": "https",
    })
    assert len(config) == 10  # kafka-python refuses unknown settings: each must be a real one
    assert set(config) <= set(KafkaConsumer.DEFAULT_CONFIG) & set(KafkaAdminClient.DEFAULT_CONFIG)


@pytest.mark.parametrize("options", [
    {"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks", "kafka.ssl.truststore.password": "hunter2"},
    {"kafka.ssl.keystore.type": "PKCS12", "kafka.ssl.keystore.location": "/k.p12",
     "kafka.ssl.keystore.password": "hunter2"},
    {"kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE----- hunter2"},
    {"kafka.sasl.mechanism": "OAUTHBEARER"},
    {"kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";'},
])
def test_what_kafka_python_cannot_do_is_refused_without_leaking_secrets(options):
    with pytest.raises(UnsupportedKafkaOption) as refused:
        client_config_from_kafka_options(options)
    assert "hunter2" not in str(refused.value)


def test_secret_values_cover_passwords_inside_and_outside_the_jaas_config():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="monitor" '
            'password="p\\"w;d=1" tokenauth=true;')
    options = {"kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.password": "trust-pw",
               "kafka.ssl.key.password": "key-pw", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
               "kafka.security.protocol": "SASL_SSL"}
    found = secret_values(options)
    assert jaas in found and "trust-pw" in found and "key-pw" in found and 'p\\"w;d=1' in found
    assert "monitor" not in found and "/etc/kafka/ca.pem" not in found and "SASL_SSL" not in found
    message = f"failed with {jaas} and key-pw at /etc/kafka/ca.pem"
    assert redact(message, found) == "failed with *** and *** at /etc/kafka/ca.pem"
    assert redact("password=p\\\"w;d=1 seen", found) == "password=*** seen"


def test_a_broker_closing_every_login_counts_as_refused_credentials():
    """kafka-python often takes the broker's close after a refused SCRAM login before the refusal itself
    (every attempt of one run under load): only disconnections mid-login, several, on SASL, count."""
    from kafka import errors as Errors

    from streaming.cluster.client import _refusal

    closed = [Errors.KafkaConnectionError("socket disconnected") for _ in range(3)]
    assert "authentication failed" in (_refusal(closed, sasl=True) or "")
    assert _refusal(closed, sasl=False) is None
    assert _refusal(closed[:2], sasl=True) is None
    assert _refusal([*closed, Errors.KafkaConnectionError("Connection refused")], sasl=True) is None
    assert _refusal([closed[0]] * 3, sasl=True) is None  # one failure logged three times is one attempt

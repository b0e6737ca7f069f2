"""--kafka-config FILE: Java-properties parsing, precedence, errors, and the one route to every Kafka client."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.cluster.client import client_config_from_kafka_options, secret_values
from streaming.cluster.config import KafkaConfigFileError, load_kafka_config
from streaming.decode.source import source_options
from streaming.options import parse_args

PASSWORD = "s3cr3t-in-the-file"
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="monitor" password="{PASSWORD}";'


def write(tmp_path: Path, text: str, name: str = "kafka.properties") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_java_properties_syntax(tmp_path: Path) -> None:
    path = write(tmp_path, "\n".join([
        "# a comment",
        "   ! another comment",
        "",
        "security.protocol=SASL_SSL",
        "sasl.mechanism : SCRAM-SHA-512",
        "client.rack   eu-west-1a",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\",
        '    username="monitor" \\',
        f'    password="{PASSWORD}";',
        "ssl.endpoint.identification.algorithm=",
        "ssl.truststore.location = /etc/kafka/ca.pem  ",
        "escaped.value=tab\\there \\u00e9 \\\\",
        "ends.with.escaped.backslash=a\\\\",
        "next=value",
        "security.protocol=SSL",  # a later line wins, as in Java
    ]) + "\n")
    assert load_kafka_config(path) == {
        "security.protocol": "SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.rack": "eu-west-1a",
        "sasl.jaas.config": JAAS,
        "ssl.endpoint.identification.algorithm": "",
        "ssl.truststore.location": "/etc/kafka/ca.pem  ",
        "escaped.value": "tab\there é \\",
        "ends.with.escaped.backslash": "a\\",
        "next": "value",
    }


@pytest.mark.parametrize(("text", "line", "why"), [
    ("security.protocol=SSL\njust-a-word\n", 2, "just-a-word has no '=' and no value"),
    ("a=1\n\n# c\n=value\n", 4, "no key before the separator"),
    ('a=1\n"username"="x"\n', 2, "not a Kafka client setting name"),
    ("a=1\nb=\\u00zz\n", 2, "malformed \\uXXXX escape"),
])
def test_bad_lines_are_errors_naming_file_and_line_but_no_value(tmp_path: Path, text: str, line: int,
                                                                why: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(KafkaConfigFileError) as raised:
        load_kafka_config(path)
    message = str(raised.value)
    assert message.startswith(f"--kafka-config {path} line {line}: ") and why in message, message
    assert '"x"' not in message and '"y"' not in message


def test_unreadable_or_binary_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.properties"
    with pytest.raises(KafkaConfigFileError, match=rf"--kafka-config {missing}: cannot read it \(No such file"):
        load_kafka_config(missing)
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"a=1\nb=\xff\xfe\n")
    with pytest.raises(KafkaConfigFileError, match=rf"--kafka-config {binary} line 2: not UTF-8"):
        load_kafka_config(binary)


def test_command_line_error_for_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, f"sasl.jaas.config={JAAS}\nnotvalid\n")
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--kafka-config", str(path)], environ={})
    err = capsys.readouterr().err
    assert f"--kafka-config {path} line 2:" in err and PASSWORD not in err


def test_precedence_command_line_over_environment_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "bootstrap.servers=file:9092\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                           f"sasl.jaas.config={JAAS}\n")
    options = parse_args(["--kafka-config", str(path)], environ={})
    assert options.kafka.bootstrap_servers == "file:9092"
    assert options.kafka.config_file == path
    assert options.kafka.kafka_options == {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                                           "kafka.sasl.jaas.config": JAAS}
    env = {"REBALANCE_MONITOR_KAFKA_CONFIG": str(path), "REBALANCE_MONITOR_BOOTSTRAP_SERVER": "env:9092"}
    options = parse_args(["--kafka.sasl.mechanism", "SCRAM-SHA-512"], environ=env)
    assert options.kafka.bootstrap_servers == "env:9092"
    assert options.kafka.kafka_options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"  # --kafka.* over the file
    options = parse_args(["--bootstrap-server", "cli:9092"], environ=env)
    assert options.kafka.bootstrap_servers == "cli:9092"


def test_file_settings_reach_spark_and_the_kafka_python_clients(tmp_path: Path) -> None:
    """The same path as --kafka.* options: Spark's source options, the poller's config, the redaction list."""
    path = write(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={JAAS}\n"
                           "ssl.truststore.type=PEM\nssl.truststore.location=/etc/kafka/ca.pem\n"
                           "bootstrap.servers=file:9092\n")
    options = parse_args(["--bootstrap-server", "cli:9092", "--kafka-config", str(path)], environ={})
    spark = source_options(options.kafka, options.source, 50)
    assert spark["kafka.bootstrap.servers"] == "cli:9092"  # the file's bootstrap.servers does not win
    assert spark["kafka.sasl.jaas.config"] == JAAS and spark["kafka.security.protocol"] == "SASL_SSL"
    client = client_config_from_kafka_options(options.kafka.kafka_options)
    assert client == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                      "sasl_plain_username": "monitor", "sasl_plain_password": PASSWORD,
                      "ssl_cafile": "/etc/kafka/ca.pem"}
    assert PASSWORD in secret_values(options.kafka.kafka_options)

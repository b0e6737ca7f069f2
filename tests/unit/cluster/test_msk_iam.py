"""Amazon MSK IAM's signing, for real but without AWS: kafka-python's AWS_MSK_IAM mechanism, built as the job's
clients build it from the mapped ``kafka.*`` options, signs with fake static credentials from the environment;
the payload it would send the broker is checked field by field, and its signature against one botocore's own
SigV4 query signer computes independently for the same request. No network: the credentials come from the
environment and any connection attempt fails the test.

Not run here: a real MSK cluster's check of the signature, credentials from AWS STS, an instance or task role,
or a web identity token (docs/security.md)."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import socket
import urllib.parse
from typing import Any

import pytest
from kafka.errors import KafkaConfigurationError
from kafka.net.connection import KafkaConnection
from kafka.net.manager import KafkaConnectionManager
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.sasl.msk import SaslMechanismAwsMskIam

from streaming.cluster.client import client_config_from_kafka_options
from tests.conftest import missing

MSK = {"kafka.bootstrap.servers": "b-1.monitor.abc123.c2.kafka.eu-west-1.amazonaws.com:9098",
       "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "AWS_MSK_IAM",
       "kafka.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
       "kafka.sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler"}
BROKER = "b-1.monitor.abc123.c2.kafka.eu-west-1.amazonaws.com"  # the host name the connection signs for
# AWS's documentation example keys: fake, and unique enough that any occurrence in the payload is a leak.
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLE/session+token=="  # '/', '+' and '=' must be URI-encoded when signed
REGION = "eu-west-1"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> pytest.MonkeyPatch:
    """Static credentials and a region in the environment only: no profile, no config file, no instance
    metadata, and no socket may connect."""
    if importlib.util.find_spec("botocore") is None:
        missing("botocore is not installed: `make setup` installs pyproject.toml's test extra")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"the signing tried to connect: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    return monkeypatch


def mechanism_as_the_clients_build_it(options: dict[str, str]) -> Any:
    """kafka-python's SASL mechanism for ``options``, made the way a connection makes it: the job's mapped
    config, filtered by the connection manager and the connection (each keeps only the settings it knows),
    then ``get_sasl_mechanism(sasl_mechanism)(host=..., **connection config)`` as its SASL handshake does."""
    config = client_config_from_kafka_options(options)
    managed = {k: v for k, v in config.items() if k in KafkaConnectionManager.DEFAULT_CONFIG}
    assert managed == config, "every mapped setting reaches the connections"
    connection = KafkaConnection(None, **managed)
    return get_sasl_mechanism(connection.config["sasl_mechanism"])(host=BROKER, **connection.config)


def signed_payload(options: dict[str, str]) -> tuple[dict[str, str], datetime.datetime, datetime.datetime]:
    """The mechanism's first (and only) SASL message, decoded, with the clock's readings around it."""
    mechanism = mechanism_as_the_clients_build_it(options)
    assert isinstance(mechanism, SaslMechanismAwsMskIam)
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    raw = mechanism.auth_bytes()
    after = datetime.datetime.now(datetime.UTC)
    assert SECRET_KEY.encode() not in raw and urllib.parse.quote(SECRET_KEY, safe="").encode() not in raw
    return json.loads(raw), before, after


def botocore_signature(payload: dict[str, str], *, host: str = BROKER, region: str = REGION,
                       access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, token: str | None = SESSION_TOKEN,
                       monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """What botocore's SigV4 query signer (a presigned URL) makes of ``kafka://<host>/?Action=kafka-cluster:Connect``
    at the payload's own timestamp, with the test's credentials: its signature and its other query parameters."""
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signed_at = datetime.datetime.strptime(payload["x-amz-date"], "%Y%m%dT%H%M%SZ")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *args, **kwargs: signed_at)
    request = AWSRequest(method="GET", url=f"kafka://{host}/?Action=kafka-cluster%3AConnect")
    botocore.auth.SigV4QueryAuth(Credentials(access_key, secret_key, token), "kafka-cluster", region,
                                 expires=900).add_auth(request)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(request.url).query, keep_blank_values=True))
    return query.pop("X-Amz-Signature"), query


def test_the_payload_has_the_fields_msk_expects(aws_env):
    payload, before, after = signed_payload(MSK)
    signed_at = datetime.datetime.strptime(payload["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    assert before <= signed_at <= after, "signed now, in UTC"
    assert set(payload) == {"version", "host", "user-agent", "action", "x-amz-algorithm", "x-amz-credential",
                            "x-amz-date", "x-amz-signedheaders", "x-amz-expires", "x-amz-security-token",
                            "x-amz-signature"}
    assert payload["version"] == "2020_10_22"
    assert payload["host"] == BROKER
    assert payload["user-agent"]  # free text: kafka-python names itself
    assert payload["action"] == "kafka-cluster:Connect"
    assert payload["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    assert payload["x-amz-credential"] == f"{ACCESS_KEY}/{signed_at:%Y%m%d}/{REGION}/kafka-cluster/aws4_request"
    assert payload["x-amz-expires"] == "900"
    assert payload["x-amz-security-token"] == SESSION_TOKEN
    assert payload["x-amz-signedheaders"] == "host"
    assert re.fullmatch(r"[0-9a-f]{64}", payload["x-amz-signature"])


def test_the_signature_is_botocores_sigv4_of_the_same_request(aws_env):
    payload, _, _ = signed_payload(MSK)
    signature, query = botocore_signature(payload, monkeypatch=aws_env)
    assert payload["x-amz-signature"] == signature
    # The parameters botocore signed are the payload's: the same string was signed on both sides.
    assert query == {"Action": payload["action"], "X-Amz-Algorithm": payload["x-amz-algorithm"],
                     "X-Amz-Credential": payload["x-amz-credential"], "X-Amz-Date": payload["x-amz-date"],
                     "X-Amz-Expires": payload["x-amz-expires"], "X-Amz-SignedHeaders": payload["x-amz-signedheaders"],
                     "X-Amz-Security-Token": payload["x-amz-security-token"]}


@pytest.mark.parametrize("changed", [{"region": "us-east-1"}, {"secret_key": SECRET_KEY[:-1] + "X"},
                                     {"host": "b-2.monitor.abc123.c2.kafka.eu-west-1.amazonaws.com"},
                                     {"token": SESSION_TOKEN + "x"}])
def test_the_comparison_tells_a_wrong_signature(aws_env, changed):
    """The check above can fail: botocore signing anything else (region, secret, host, token) disagrees."""
    payload, _, _ = signed_payload(MSK)
    signature, _ = botocore_signature(payload, monkeypatch=aws_env, **changed)
    assert payload["x-amz-signature"] != signature


def test_permanent_credentials_sign_without_a_security_token(aws_env):
    aws_env.delenv("AWS_SESSION_TOKEN")
    payload, _, _ = signed_payload(MSK)
    assert "x-amz-security-token" not in payload
    signature, query = botocore_signature(payload, token=None, monkeypatch=aws_env)
    assert payload["x-amz-signature"] == signature and "X-Amz-Security-Token" not in query


def test_the_region_and_the_credentials_come_from_the_environment(aws_env):
    aws_env.setenv("AWS_DEFAULT_REGION", "ap-southeast-2")
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIDOTHEREXAMPLE")
    payload, _, _ = signed_payload(MSK)
    assert payload["x-amz-credential"].startswith("AKIDOTHEREXAMPLE/")
    assert "/ap-southeast-2/kafka-cluster/aws4_request" in payload["x-amz-credential"]
    signature, _ = botocore_signature(payload, region="ap-southeast-2", access_key="AKIDOTHEREXAMPLE",
                                      monkeypatch=aws_env)
    assert payload["x-amz-signature"] == signature


def test_no_region_is_named_before_anything_is_sent(aws_env):
    aws_env.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(KafkaConfigurationError, match="AWS_DEFAULT_REGION"):
        mechanism_as_the_clients_build_it(MSK).auth_bytes()


def test_the_brokers_answer_completes_the_login(aws_env):
    mechanism = mechanism_as_the_clients_build_it(MSK)
    mechanism.auth_bytes()
    assert not mechanism.is_done()
    mechanism.receive(json.dumps({"version": "2020_10_22", "request-id": "r-1"}).encode())
    assert mechanism.is_done() and mechanism.is_authenticated()


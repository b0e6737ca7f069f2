"""OAUTHBEARER for the job's kafka-python clients: Kafka's unsecured tokens, OIDC client credentials against a
loopback token endpoint, Amazon MSK IAM's and GSSAPI's mapping, and what each missing setting says."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from streaming.cluster import client as client_module
from streaming.cluster.client import (
    KafkaAccessError,
    UnsupportedKafkaOption,
    check_access,
    check_mechanism_support,
    client_config_from_kafka_options,
    secret_values,
)
from streaming.cluster.oauth import (
    LOGIN_MODULE,
    MSK_OAUTH_HANDLER,
    OIDC_HANDLER,
    ClientCredentialsTokenProvider,
    TokenError,
    jwt_claims,
    unsecured_jwt,
)

SECRET = "client-secret-7f3a9c"  # unique: any occurrence in a message is a leak


def unsecured_options(jaas_options: str = 'unsecuredLoginStringClaim_sub="monitor"') -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config": f"{LOGIN_MODULE} required {jaas_options};"}


def oidc_options(url: str, jaas_options: str = f'clientId="monitor-app" clientSecret="{SECRET}" scope="kafka"',
                 **more: str) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.login.callback.handler.class": OIDC_HANDLER,
            "kafka.sasl.oauthbearer.token.endpoint.url": url,
            "kafka.sasl.jaas.config": f"{LOGIN_MODULE} required {jaas_options};",
            **{f"kafka.{name.replace('_', '.')}": value for name, value in more.items()}}


def provider_of(options: dict[str, str]) -> Any:
    return client_config_from_kafka_options(options)["sasl_oauth_token_provider"]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- Kafka's unsecured login ------------------------------------------------------------------------------------


def test_unsecured_token_is_kafkas_unsigned_jwt_with_the_configured_claims():
    options = unsecured_options('unsecuredLoginStringClaim_sub="monitor" unsecuredLoginNumberClaim_level="3" '
                                'unsecuredLoginListClaim_scope=",read,describe" unsecuredLoginLifetimeSeconds="600" '
                                'unsecuredLoginExtension_traceId="abc"')
    config = client_config_from_kafka_options(options)
    assert config["sasl_mechanism"] == "OAUTHBEARER" and config["security_protocol"] == "SASL_PLAINTEXT"
    provider = config["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider)
    token = provider.token()
    header, _, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    decoded = jwt_claims(token)
    assert decoded["sub"] == "monitor" and decoded["level"] == 3 and decoded["scope"] == ["read", "describe"]
    assert decoded["exp"] - decoded["iat"] == pytest.approx(600)
    assert provider.token() == token  # kept, not made afresh per connection
    assert provider.extensions() == {"traceId": "abc"}
    # What kafka-python sends in the SASL exchange (RFC 7628's client first message).
    first = SaslMechanismOAuth(sasl_oauth_token_provider=provider).auth_bytes()
    assert first == f"n,,\x01auth=Bearer {token}\x01traceId=abc\x01\x01".encode()


def test_unsecured_token_is_made_again_once_most_of_its_lifetime_passed():
    from streaming.cluster.oauth import UnsecuredTokenProvider

    clock = Clock()
    provider = UnsecuredTokenProvider({"sub": "monitor"}, 100, {}, clock=clock)
    first = provider.token()
    clock.now += 79
    assert provider.token() == first
    clock.now += 2  # past 0.8 of the lifetime, Kafka's default refresh window
    assert provider.token() != first and jwt_claims(provider.token())["iat"] == clock.now


def test_a_different_principal_claim_name_is_the_one_required():
    options = unsecured_options('unsecuredLoginPrincipalClaimName="principal" unsecuredLoginStringClaim_sub="x"')
    with pytest.raises(UnsupportedKafkaOption, match="needs unsecuredLoginStringClaim_principal"):
        client_config_from_kafka_options(options)
    provider = provider_of(unsecured_options('unsecuredLoginPrincipalClaimName="principal" '
                                             'unsecuredLoginStringClaim_principal="monitor"'))
    assert jwt_claims(provider.token())["principal"] == "monitor"


@pytest.mark.parametrize(("options", "named"), [
    ({"kafka.sasl.mechanism": "OAUTHBEARER"}, "needs kafka.sasl.jaas.config"),
    (unsecured_options(""), "needs unsecuredLoginStringClaim_sub"),
    (unsecured_options('unsecuredLoginStringClaim_sub="a" unsecuredLoginStringClaim_exp="1"'), "exp claim"),
    ({**unsecured_options(), "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
      'required username="u" password="hunter2";'}, "takes " + LOGIN_MODULE),
    ({**unsecured_options(), "kafka.sasl.login.callback.handler.class": "com.example.MyHandler"},
     "com.example.MyHandler: the job's own clients"),
    ({**unsecured_options(), "kafka.sasl.login.callback.handler.class": MSK_OAUTH_HANDLER}, "AWS_MSK_IAM"),
    ({**unsecured_options(), "kafka.sasl.login.refresh.window.factor": "0.2"}, "refresh.window.factor"),
])
def test_what_is_missing_or_unsupported_is_named(options, named):
    with pytest.raises(UnsupportedKafkaOption) as refused:
        client_config_from_kafka_options(options)
    assert named in str(refused.value)
    assert "hunter2" not in str(refused.value)


# -- OIDC client credentials against a loopback token endpoint --------------------------------------------------


class TokenEndpoint:
    """A token endpoint on 127.0.0.1: answers each POST with ``answer`` (status, JSON) and records the requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: tuple[int, dict[str, Any]] = (200, {"access_token": "t-1", "token_type": "Bearer",
                                                        "expires_in": 300})
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "form": dict(urllib.parse.parse_qsl(body))})
                status, answer = endpoint.answer
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint()
    yield server
    server.close()


def test_client_credentials_grant_as_kafka_posts_it(endpoint: TokenEndpoint):
    provider = provider_of(oidc_options(endpoint.url, f'clientId="monitor-app" clientSecret="{SECRET}" '
                                                      'scope="kafka" extension_logicalCluster="lkc-1"'))
    assert isinstance(provider, ClientCredentialsTokenProvider)
    assert provider.token() == "t-1"
    assert provider.token() == "t-1"
    assert len(endpoint.requests) == 1, "the token is kept, not fetched per call"
    request = endpoint.requests[0]
    assert request["path"] == "/oauth2/token"
    assert request["form"] == {"grant_type": "client_credentials", "scope": "kafka"}
    assert request["headers"]["Authorization"] == "Basic " + base64.b64encode(
        f"monitor-app:{SECRET}".encode()).decode()
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert provider.extensions() == {"logicalCluster": "lkc-1"}
    assert SECRET not in repr(provider) and SECRET not in repr(client_config_from_kafka_options(
        oidc_options(endpoint.url)))


def test_no_scope_and_urlencoded_header(endpoint: TokenEndpoint):
    provider = provider_of(oidc_options(endpoint.url, 'clientId="app id" clientSecret="s&cret:1"',
                                        sasl_oauthbearer_header_urlencode="true"))
    provider.token()
    request = endpoint.requests[0]
    assert request["form"] == {"grant_type": "client_credentials"}
    assert base64.b64decode(request["headers"]["Authorization"].removeprefix("Basic ")) == b"app+id:s%26cret%3A1"


def test_a_token_is_fetched_again_near_its_expiry_and_kept_when_the_endpoint_fails_meanwhile(endpoint):
    clock = Clock()
    provider = ClientCredentialsTokenProvider(endpoint.url, "app", SECRET, clock=clock)
    endpoint.answer = (200, {"access_token": "t-1", "expires_in": 100})
    assert provider.token() == "t-1"
    clock.now += 79
    assert provider.token() == "t-1" and len(endpoint.requests) == 1
    clock.now += 2
    endpoint.answer = (503, {"error": "temporarily_unavailable"})
    assert provider.token() == "t-1", "still valid: the old token, not an error"
    clock.now += 20  # expired now
    with pytest.raises(TokenError) as failed:
        provider.token()
    assert not failed.value.refused and "HTTP 503: temporarily_unavailable" in str(failed.value)
    endpoint.answer = (200, {"access_token": "t-2", "expires_in": 100})
    assert provider.token() == "t-2"


def test_the_jwts_own_expiry_counts_when_sooner():
    clock = Clock()
    jwt = unsecured_jwt({"sub": "monitor", "exp": clock.now + 50})
    from streaming.cluster.oauth import _lifetime

    assert _lifetime(jwt, clock.now, 3600) == 50
    assert _lifetime(jwt, clock.now, None) == 50
    assert _lifetime("opaque-token", clock.now, None) == 60  # nothing says: asked again each minute


def test_refused_credentials_are_named_without_the_secret(endpoint: TokenEndpoint):
    endpoint.answer = (401, {"error": "invalid_client", "error_description": "bad secret " + SECRET})
    provider = provider_of(oidc_options(endpoint.url))
    with pytest.raises(TokenError) as refused:
        provider.token()
    message = str(refused.value)
    assert refused.value.refused
    assert f"token endpoint {endpoint.url} answered HTTP 401: invalid_client" in message
    assert "clientSecret" in message and SECRET not in message


def test_the_preflight_names_a_refusing_token_endpoint_before_any_broker(endpoint: TokenEndpoint):
    endpoint.answer = (400, {"error": "invalid_client"})
    config = client_config_from_kafka_options(oidc_options(endpoint.url))
    with pytest.raises(KafkaAccessError) as refused:
        check_access("127.0.0.1:1", config, "__consumer_offsets", timeout_s=1)
    assert "no OAUTHBEARER token" in str(refused.value) and "invalid_client" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_an_unreachable_token_endpoint_is_left_to_the_retries(endpoint: TokenEndpoint, caplog):
    url = endpoint.url
    endpoint.close()
    config = client_config_from_kafka_options(oidc_options(url))
    assert check_access("127.0.0.1:1", config, "__consumer_offsets", timeout_s=1) is False
    assert "could not be reached" in caplog.text and SECRET not in caplog.text


def test_a_non_oauth_answer_is_an_error_naming_what_is_missing(endpoint: TokenEndpoint):
    endpoint.answer = (200, {"id_token": "x"})
    with pytest.raises(TokenError, match="without an access_token"):
        provider_of(oidc_options(endpoint.url)).token()


def test_a_token_file_url(tmp_path: Path):
    jwt = unsecured_jwt({"sub": "monitor", "exp": 4_000_000_000})
    path = tmp_path / "token"
    path.write_text(jwt + "\n")
    provider = provider_of(oidc_options(path.as_uri(), ""))  # no client credentials: the file is the token
    assert provider.token() == jwt
    with pytest.raises(TokenError, match="could not be read"):
        provider_of(oidc_options((tmp_path / "missing").as_uri(), "")).token()


@pytest.mark.parametrize(("options", "named"), [
    (oidc_options(""), "needs kafka.sasl.oauthbearer.token.endpoint.url"),
    (oidc_options("ftp://idp/token"), "must be an http, https or file URL"),
    (oidc_options("https://idp/token", f'clientSecret="{SECRET}"'), "needs clientId in"),
    (oidc_options("https://idp/token", 'clientId="app"'), "needs clientSecret in"),
    (oidc_options("https://idp/token", ""), "needs clientId and clientSecret"),
    (oidc_options("https://idp/token", f'clientId="a" clientSecret="{SECRET}" ssl.truststore.location="/t.jks"'),
     "ssl.truststore.type=JKS"),
    (oidc_options("https://idp/token", sasl_login_read_timeout_ms="soon"), "kafka.sasl.login.read.timeout.ms"),
])
def test_missing_oidc_settings_are_named_without_the_secret(options, named):
    with pytest.raises(UnsupportedKafkaOption) as refused:
        client_config_from_kafka_options(options)
    assert named in str(refused.value) and SECRET not in str(refused.value)


def test_tls_and_timeouts_of_the_token_endpoint():
    provider = provider_of(oidc_options("https://idp.example/token", f'clientId="a" clientSecret="{SECRET}" '
                                        'ssl.truststore.type="PEM" ssl.truststore.location="/etc/idp-ca.pem" '
                                        'ssl.endpoint.identification.algorithm=""',
                                        sasl_login_connect_timeout_ms="2000", sasl_login_read_timeout_ms="5000"))
    assert (provider._cafile, provider._check_hostname, provider._timeout_s) == ("/etc/idp-ca.pem", False, 5.0)


def test_every_setting_produced_is_one_both_kafka_python_clients_accept(endpoint: TokenEndpoint):
    from kafka import KafkaAdminClient, KafkaConsumer

    for options in (unsecured_options(), oidc_options(endpoint.url)):
        config = client_config_from_kafka_options(options)
        assert set(config) <= set(KafkaConsumer.DEFAULT_CONFIG) & set(KafkaAdminClient.DEFAULT_CONFIG)


# -- Amazon MSK IAM and Kerberos: kafka-python's own mechanisms, their Python packages ---------------------------

MSK = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "AWS_MSK_IAM",
       "kafka.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
       "kafka.sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler"}


def test_msk_iam_maps_to_kafka_pythons_aws_msk_iam():
    assert client_config_from_kafka_options(MSK) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"}


@pytest.mark.parametrize(("options", "named"), [
    ({**MSK, "kafka.security.protocol": "SASL_PLAINTEXT"}, "needs kafka.security.protocol=SASL_SSL"),
    ({**MSK, "kafka.sasl.jaas.config": 'software.amazon.msk.auth.iam.IAMLoginModule required '
      'awsProfileName="prod";'}, "awsProfileName in"),
    ({**MSK, "kafka.sasl.jaas.config": 'software.amazon.msk.auth.iam.IAMLoginModule required '
      'awsRoleArn="arn:aws:iam::1:role/r" awsRoleSessionName="s";'}, "awsRoleArn, awsRoleSessionName in"),
])
def test_msk_iam_what_kafka_python_cannot_honour_is_named(options, named):
    with pytest.raises(UnsupportedKafkaOption, match=named):
        client_config_from_kafka_options(options)


@pytest.mark.parametrize(("mechanism", "package"), [("AWS_MSK_IAM", "botocore"), ("GSSAPI", "gssapi")])
def test_a_mechanisms_missing_python_package_is_named_before_any_connection(monkeypatch, mechanism, package):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    config = {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism}
    with pytest.raises(UnsupportedKafkaOption, match=f"need the Python package '{package}'.*pip install {package}"):
        check_mechanism_support(config)
    with pytest.raises(UnsupportedKafkaOption):
        check_access("127.0.0.1:1", config, "__consumer_offsets", timeout_s=1)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    check_mechanism_support(config)  # installed: nothing to say
    check_mechanism_support({"sasl_mechanism": "SCRAM-SHA-512"})


def test_a_refused_token_seen_in_the_clients_errors_is_a_refusal():
    refused = TokenError("token endpoint https://idp/token answered HTTP 401: invalid_client", refused=True)
    assert (client_module._refusal([refused], sasl=True) or "").startswith("no OAUTHBEARER token")
    assert client_module._refusal([TokenError("unreachable", refused=False)], sasl=True) is None


def test_only_secrets_are_redacted_not_the_names_the_errors_need():
    found = secret_values(oidc_options("https://idp/token", f'clientId="monitor-app" clientSecret="{SECRET}" '
                                                            'scope="kafka" extension_poolId="pool-9"'))
    assert SECRET in found and "pool-9" in found
    assert not {"https://idp/token", "monitor-app", "kafka"} & set(found)
    assert "https://u:p@idp/token" in secret_values({"kafka.sasl.oauthbearer.token.endpoint.url":
                                                     "https://u:p@idp/token"})
    assert "monitor" not in secret_values(unsecured_options())

"""The real job over SASL/OAUTHBEARER, on a real broker in Kafka's unsecured-token mode.

The broker has a SASL_PLAINTEXT listener taking OAUTHBEARER, validated by Kafka's default server
callback (unsigned ``alg: none`` tokens), and KRaft's authorizer with the documented ACLs granted to
``User:rebalance-monitor`` only: a client gets in with the principal its token names, so what it may do
proves which principal each of the job's clients logged in as. Spark's source makes its token with
Kafka's own login module; the job's kafka-python clients (pre-flight, lag poller, live poller, metadata)
with :mod:`streaming.cluster.oauth`, from the same ``--kafka-config`` file.

OIDC client credentials run twice: for the kafka-python clients alone against a loopback token endpoint
handing out unsigned tokens (the unsecured broker cannot tell where a token came from), and for the whole
job against a second broker that validates RS256 tokens with Kafka's JWT validator and a JWKS file, the
loopback endpoint signing them: Spark's source then logs in through Kafka's own
``OAuthBearerLoginCallbackHandler``. MSK IAM's signing against AWS is not run here.
"""

from __future__ import annotations

import json
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from streaming.cluster.client import KafkaAccessError, check_access, client_config_from_kafka_options
from streaming.cluster.oauth import LOGIN_MODULE, OIDC_HANDLER, unsecured_jwt
from testbed.broker import LocalKafka, acl_command, run_kafka_tool
from testbed.workload import Admin, Member, start_members
from tests.scenarios.test_acls import PRINCIPAL_USER, documented_acl_commands
from tests.support.exposition import Samples, fetch, series
from tests.support.monitor_helpers import JOB_START_TIMEOUT_S, wait_for_url

pytestmark = pytest.mark.slow

CLIENT_SECRET = f"oidc-{secrets.token_urlsafe(18)}"  # unique: any occurrence in an output is a leak
FAIL_FAST_BOUND_S = 60
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(tmp_path_factory.mktemp("kafka-oauth"), oauthbearer=True, authorizer=True, heap="512m")
    broker.start()
    try:
        for words in documented_acl_commands():
            result = run_kafka_tool(acl_command(broker.version), ["--bootstrap-server", broker.bootstrap, *words],
                                    broker.version)
            assert result.returncode == 0, f"kafka-acls {shlex.join(words)}:\n{result.stdout}\n{result.stderr}"
        admin = Admin(broker.bootstrap)
        try:  # the offsets topic exists once a group commits: the pre-flight then checks Describe and Read
            admin.create_topic("oauth-orders", 2)
            admin.produce("oauth-orders", 40)
            admin.commit("oauth-committer", {("oauth-orders", 0): 3, ("oauth-orders", 1): 5})
        finally:
            admin.close()
        yield broker
    finally:
        broker.stop()


class TokenEndpoint:
    """An OIDC token endpoint on 127.0.0.1 for one client: the client credentials grant, answered with a
    token for ``subject`` (unsigned, or RS256-signed by ``signer``); anything else 401 invalid_client.
    ``grants`` counts the tokens handed out by the asking client's User-Agent (Java's or Python's)."""

    def __init__(self, client_id: str, client_secret: str, subject: str, signer: Signer | None = None) -> None:
        import base64

        expected = "Basic " + base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self.grants: dict[str, int] = {}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Authorization") == expected:
                    agent = self.headers.get("User-Agent", "").split("/")[0]
                    endpoint.grants[agent] = endpoint.grants.get(agent, 0) + 1
                    now = int(time.time())
                    claims = {"sub": subject, "iat": now, "exp": now + 600, "scope": "kafka"}
                    token = signer.sign(claims) if signer is not None else unsecured_jwt(claims)
                    status, answer = 200, {"access_token": token, "token_type": "Bearer", "expires_in": 600}
                else:
                    status, answer = 401, {"error": "invalid_client"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Signer:
    """An identity provider's RS256 signing key, its public half written as a JWKS file for the broker."""

    KID = "test-key-1"

    def __init__(self, directory: Path) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()
        self.jwks = directory / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [{"kty": "RSA", "kid": self.KID, "use": "sig", "alg": "RS256",
                                                   "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8)),
                                                   "e": _b64(numbers.e.to_bytes(3))}]}))

    def sign(self, claims: dict[str, Any]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        header = {"alg": "RS256", "typ": "JWT", "kid": self.KID}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return Signer(tmp_path_factory.mktemp("idp"))


@pytest.fixture(scope="module")
def oidc_broker(tmp_path_factory: pytest.TempPathFactory, signer: Signer) -> Iterator[LocalKafka]:
    """A broker whose OAUTHBEARER listener takes only tokens signed by ``signer`` (Kafka's JWT validator
    reading its JWKS file): no authorizer, the principal was proven on the unsecured broker."""
    broker = LocalKafka(tmp_path_factory.mktemp("kafka-oidc"), oauthbearer=True,
                        oauth_jwks_url=signer.jwks.as_uri(), heap="512m")
    broker.start()
    try:
        admin = Admin(broker.bootstrap)
        try:
            admin.create_topic("oidc-orders", 2)
            admin.produce("oidc-orders", 30)
            admin.commit("oidc-committer", {("oidc-orders", 0): 4, ("oidc-orders", 1): 6})
        finally:
            admin.close()
        yield broker
    finally:
        broker.stop()


def unsecured_options(principal: str) -> dict[str, str]:
    return LocalKafka.client_oauth_options(principal)


def oidc_options(url: str, client_secret: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.login.callback.handler.class": OIDC_HANDLER, "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.jaas.config": f'{LOGIN_MODULE} required clientId="rebalance-monitor-app" '
                                f'clientSecret="{client_secret}" scope="kafka";'}


def kafka_python_config(options: dict[str, str]) -> dict[str, Any]:
    return client_config_from_kafka_options({f"kafka.{name}": value for name, value in options.items()})


def test_the_preflight_and_admin_clients_log_in_with_the_tokens_principal(oauth_broker: LocalKafka) -> None:
    """kafka-python over OAUTHBEARER, both token sources: the granted principal passes the pre-flight (Describe
    and a Read of the offsets topic) and lists groups; a token naming another principal is refused the topic."""
    from kafka import KafkaAdminClient

    started = time.monotonic()
    config = kafka_python_config(unsecured_options(PRINCIPAL_USER))
    assert check_access(oauth_broker.oauth_bootstrap, config, OFFSETS_TOPIC) is True
    admin = KafkaAdminClient(bootstrap_servers=oauth_broker.oauth_bootstrap, **config)
    try:
        assert "oauth-committer" in {group["group_id"] for group in admin.list_groups()}
        assert len(admin.list_group_offsets({"oauth-committer": None})["oauth-committer"]) == 2
    finally:
        admin.close()
    with pytest.raises(KafkaAccessError, match=r"authorization failed.*Describe"):
        check_access(oauth_broker.oauth_bootstrap, kafka_python_config(unsecured_options("intruder")), OFFSETS_TOPIC)

    endpoint = TokenEndpoint("rebalance-monitor-app", CLIENT_SECRET, PRINCIPAL_USER)
    try:
        oidc = kafka_python_config(oidc_options(endpoint.url, CLIENT_SECRET))
        assert check_access(oauth_broker.oauth_bootstrap, oidc, OFFSETS_TOPIC) is True
        assert sum(endpoint.grants.values()) == 1, "one token for the pre-flight's admin client and consumer"
        with pytest.raises(KafkaAccessError) as refused:
            check_access(oauth_broker.oauth_bootstrap, kafka_python_config(oidc_options(endpoint.url, "wrong")),
                         OFFSETS_TOPIC)
        assert "no OAUTHBEARER token" in str(refused.value) and "invalid_client" in str(refused.value)
    finally:
        endpoint.close()
    print(f"\nkafka-python over OAUTHBEARER (unsecured and OIDC tokens): {time.monotonic() - started:.1f}s")


def test_the_job_reads_through_oauthbearer(oauth_broker: LocalKafka, tmp_path: Path) -> None:
    """The job as a process, its client settings in a --kafka-config file: Spark's source (group records
    decoded) and the kafka-python clients (exact lag from the log ends, a rebalance) all get in as the
    token's principal, which may do only what the documented ACLs grant."""
    admin = Admin(oauth_broker.bootstrap)
    members: list[Member] = []
    kafka_config = tmp_path / "kafka.properties"
    kafka_config.write_text("".join(f"{name}={value}\n"
                                    for name, value in unsecured_options(PRINCIPAL_USER).items()))
    output = tmp_path / "job-output.log"
    job = None
    try:
        members.extend(start_members([Member(oauth_broker.bootstrap, "oauth-group", ["oauth-orders"], "c1")]))
        ends = admin.end_offsets([("oauth-orders", 0), ("oauth-orders", 1)])
        command = [sys.executable, "-m", "streaming.job", "--bootstrap-server", oauth_broker.oauth_bootstrap,
                   "--kafka-config", str(kafka_config), "--checkpoint-dir", str(tmp_path / "checkpoint"),
                   "--master", "local[2]", "--cluster", "oauth", "--trigger-seconds", "1", "--lag-poll-seconds", "1",
                   "--metrics-host", "127.0.0.1", "--metrics-port", "0"]
        with output.open("wb") as sink:
            job = subprocess.Popen(command, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        started = time.monotonic()
        url = wait_for_url(job, output)
        print(f"\nOAUTHBEARER job serving after {time.monotonic() - started:.1f}s")

        def wait_until(check: Any, what: str) -> Samples:
            deadline = time.monotonic() + JOB_START_TIMEOUT_S
            while time.monotonic() < deadline and job.poll() is None:
                samples = fetch(url)
                if check(samples):
                    return samples
                time.sleep(1)
            pytest.fail(f"{what} did not come through OAUTHBEARER (job exit {job.poll()}):\n"
                        f"{output.read_text(errors='replace')[-3000:]}")

        def values(samples: Samples, name: str, **labels: str) -> list[float]:
            return sorted(series(samples, name, **labels).values())

        expected_lag = {p: [float(ends[("oauth-orders", p)] - committed)] for p, committed in ((0, 3), (1, 5))}
        wait_until(lambda s: values(s, "kafka_consumergroup_current_members", group="oauth-group") == [1.0] and {
            p: values(s, "kafka_consumergroup_partition_lag", group="oauth-committer", partition=str(p))
            for p in (0, 1)} == expected_lag, "group and lag series")
        print(f"group and exact lag series after {time.monotonic() - started:.1f}s")
        members.extend(start_members([Member(oauth_broker.bootstrap, "oauth-group", ["oauth-orders"], "c2")]))
        samples = wait_until(lambda s: values(s, "kafka_consumergroup_current_members", group="oauth-group") == [2.0]
                             and values(s, "kafka_consumergroup_rebalances_total", group="oauth-group") >= [1.0],
                             "a rebalance")
        print(f"second member's rebalance after {time.monotonic() - started:.1f}s")
        assert values(samples, "kafka_consumergroup_generation", group="oauth-group", cluster="oauth")[0] >= 1
        assert values(samples, "kafka_topic_partition_log_end_offset", topic="oauth-orders", partition="0") == [
            float(ends[("oauth-orders", 0)])]
        assert not [v for v in values(samples, "rebalance_monitor_log_end_poll_errors_total") if v > 0]
    finally:
        for member in members:
            member.leave()
        admin.close()
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(90)
    assert job.returncode == 0, output.read_text(errors="replace")[-3000:]
    log_text = output.read_text(errors="replace")
    assert "unsecuredLoginStringClaim_sub" not in log_text, "the JAAS configuration reached the output"


def test_a_refused_client_secret_stops_the_job_before_spark(oauth_broker: LocalKafka, tmp_path: Path) -> None:
    """OIDC client credentials the token endpoint refuses: the job ends within seconds naming the token
    endpoint's answer, and the secret appears nowhere in its output."""
    endpoint = TokenEndpoint("rebalance-monitor-app", CLIENT_SECRET, PRINCIPAL_USER)
    wrong = f"wrong-{secrets.token_urlsafe(18)}"
    kafka_config = tmp_path / "kafka.properties"
    kafka_config.write_text("".join(f"{name}={value}\n" for name, value in oidc_options(endpoint.url, wrong).items()))
    output = tmp_path / "job-output.log"
    started = time.monotonic()
    try:
        with output.open("wb") as sink:
            job = subprocess.Popen([sys.executable, "-m", "streaming.job", "--bootstrap-server",
                                    oauth_broker.oauth_bootstrap, "--kafka-config", str(kafka_config),
                                    "--checkpoint-dir", str(tmp_path / "checkpoint"), "--metrics-port", "0"],
                                   cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            job.wait(FAIL_FAST_BOUND_S)
        except subprocess.TimeoutExpired:
            job.send_signal(signal.SIGKILL)
            job.wait(30)
            pytest.fail(f"still running after {FAIL_FAST_BOUND_S}s:\n{output.read_text(errors='replace')[-3000:]}")
    finally:
        endpoint.close()
    raw = output.read_bytes()
    last = raw.decode(errors="replace").strip().splitlines()[-1]
    print(f"\nrefused client secret: exit {job.returncode} after {time.monotonic() - started:.1f}s")
    assert job.returncode != 0
    assert last.startswith("rebalance-monitor: Kafka at ") and "no OAUTHBEARER token" in last, last
    assert "HTTP 401: invalid_client" in last, last
    assert wrong.encode() not in raw and CLIENT_SECRET.encode() not in raw
    assert not (tmp_path / "checkpoint").exists()


def test_the_job_reads_through_oidc_client_credentials(oidc_broker: LocalKafka, signer: Signer,
                                                        tmp_path: Path) -> None:
    """OIDC as deployed: a broker validating RS256 tokens against its identity provider's keys, the job's
    clients getting them with the client credentials grant. Spark's source through Kafka's own
    OAuthBearerLoginCallbackHandler (Java asks the token endpoint), the kafka-python clients through
    streaming.cluster.oauth (Python asks it), from one --kafka-config file; an unsigned token is refused."""
    with pytest.raises(KafkaAccessError, match="authentication failed"):
        check_access(oidc_broker.oauth_bootstrap, kafka_python_config(unsecured_options(PRINCIPAL_USER)),
                     OFFSETS_TOPIC)
    endpoint = TokenEndpoint("rebalance-monitor-app", CLIENT_SECRET, PRINCIPAL_USER, signer)
    admin = Admin(oidc_broker.bootstrap)
    members: list[Member] = []
    kafka_config = tmp_path / "kafka.properties"
    kafka_config.write_text("".join(f"{name}={value}\n" for name, value in oidc_options(endpoint.url,
                                                                                      CLIENT_SECRET).items()))
    output = tmp_path / "job-output.log"
    job = None
    try:
        members.extend(start_members([Member(oidc_broker.bootstrap, "oidc-group", ["oidc-orders"], "c1")]))
        ends = admin.end_offsets([("oidc-orders", 0), ("oidc-orders", 1)])
        command = [sys.executable, "-m", "streaming.job", "--bootstrap-server", oidc_broker.oauth_bootstrap,
                   "--kafka-config", str(kafka_config), "--checkpoint-dir", str(tmp_path / "checkpoint"),
                   "--master", "local[2]", "--cluster", "oidc", "--trigger-seconds", "1", "--lag-poll-seconds", "1",
                   "--metrics-host", "127.0.0.1", "--metrics-port", "0"]
        with output.open("wb") as sink:
            job = subprocess.Popen(command, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        started = time.monotonic()
        url = wait_for_url(job, output)
        expected_lag = {p: [float(ends[("oidc-orders", p)] - committed)] for p, committed in ((0, 4), (1, 6))}
        deadline = time.monotonic() + JOB_START_TIMEOUT_S
        while time.monotonic() < deadline and job.poll() is None:
            samples = fetch(url)
            if sorted(series(samples, "kafka_consumergroup_current_members", group="oidc-group").values()) == [1.0] \
                    and {p: sorted(series(samples, "kafka_consumergroup_partition_lag", group="oidc-committer",
                                          partition=str(p)).values()) for p in (0, 1)} == expected_lag:
                break
            time.sleep(1)
        else:
            pytest.fail(f"group and lag series did not come through OIDC (job exit {job.poll()}):\n"
                        f"{output.read_text(errors='replace')[-3000:]}")
        print(f"\nOIDC job: group and exact lag series after {time.monotonic() - started:.1f}s; "
              f"tokens granted {endpoint.grants}")
        assert endpoint.grants.get("Java", 0) >= 1, endpoint.grants  # Spark's source asked for its own token
        assert endpoint.grants.get("Python-urllib", 0) >= 1, endpoint.grants  # and so did the job's own clients
    finally:
        for member in members:
            member.leave()
        admin.close()
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(90)
        endpoint.close()
    assert job.returncode == 0, output.read_text(errors="replace")[-3000:]
    assert CLIENT_SECRET.encode() not in output.read_bytes()

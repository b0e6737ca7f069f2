"""The /metrics endpoint over real HTTPS (a throwaway CA), with basic auth, read-only."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.metrics import server as metrics_server
from streaming.metrics.server import BasicAuth, EndpointConfigError, hash_password
from testbed.broker import ThrowawayPki, make_throwaway_pki

BODY = b"# TYPE up gauge\nup 1\n"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayPki:
    return make_throwaway_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "users"
    path.write_text(f"# scrapers\nprometheus:{hash_password(PASSWORD)}\n\n")
    return path


@pytest.fixture
def endpoint(pki: ThrowawayPki, users_file: Path) -> Iterator[tuple[str, list[float]]]:
    renders: list[float] = []  # the timeout each render was given

    def render(timeout_s: float) -> bytes:
        renders.append(timeout_s)
        return BODY

    server = metrics_server.serve(render, "127.0.0.1", 0, tls_cert=pki.cert_pem, tls_key=pki.key_pem,
                                  basic_auth_file=users_file)
    try:
        assert server.server_address[0] == "127.0.0.1"
        yield f"https://127.0.0.1:{server.server_port}/metrics", renders
    finally:
        server.shutdown()
        server.server_close()


def request(url: str, pki: ThrowawayPki, method: str = "GET", password: str | None = None,
            user: str = "prometheus", timeout: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {} if timeout is None else {"X-Prometheus-Scrape-Timeout-Seconds": timeout}
    if password is not None:
        headers["Authorization"] = "Basic " + b64encode(f"{user}:{password}".encode()).decode()
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers),
                                    timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers), refused.read()


def test_https_asks_for_credentials_and_serves_with_them(endpoint: tuple[str, list[float]], pki: ThrowawayPki) -> None:
    url, renders = endpoint
    status, headers, _ = request(url, pki)
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="rebalance-monitor"')
    assert request(url, pki, password="wrong")[0] == 401
    assert request(url, pki, password=PASSWORD, user="somebody")[0] == 401
    assert not renders  # nothing rendered for a refused client
    status, headers, body = request(url, pki, password=PASSWORD)
    assert (status, body) == (200, BODY)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    started = time.monotonic()
    assert request(url, pki, password=PASSWORD)[0] == 200
    print(f"second scrape (verified credential remembered): {time.monotonic() - started:.3f}s")
    status, headers, body = request(url, pki, method="HEAD", password=PASSWORD)
    assert (status, body, headers["Content-Length"]) == (200, b"", str(len(BODY)))


def test_a_render_is_given_the_timeout_its_scraper_sent(endpoint: tuple[str, list[float]],
                                                        pki: ThrowawayPki) -> None:
    """Prometheus sends its scrape timeout; without it, or with something that is no timeout, Prometheus's
    default is assumed."""
    url, renders = endpoint
    sent = ["2.5", "0.75", None, "ten", "0", "-3", "inf", "nan"]
    for timeout in sent:
        assert request(url, pki, password=PASSWORD, timeout=timeout)[0] == 200
    assert renders[-len(sent):] == [2.5, 0.75] + [metrics_server.DEFAULT_SCRAPE_TIMEOUT_S] * 6


def test_only_reads_are_allowed(endpoint: tuple[str, list[float]], pki: ThrowawayPki) -> None:
    url, renders = endpoint
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = request(url, pki, method=method, password=PASSWORD)
        assert (status, headers["Allow"]) == (405, "GET, HEAD"), method
    assert request(url.replace("/metrics", "/-/reload"), pki, method="POST", password=PASSWORD)[0] == 404
    assert not renders


def test_clients_must_trust_the_certificate_and_speak_tls(endpoint: tuple[str, list[float]], tmp_path: Path) -> None:
    url, _ = endpoint
    stranger = make_throwaway_pki(tmp_path / "other")
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(url, timeout=10, context=ssl.create_default_context(cafile=str(stranger.ca_pem)))
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    port = int(url.split(":")[2].split("/")[0])
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        plain.request("GET", "/metrics")
        plain.getresponse()


def test_a_client_stalled_in_the_handshake_does_not_block_scrapes(endpoint: tuple[str, list[float]],
                                                                  pki: ThrowawayPki) -> None:
    url, _ = endpoint
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)):  # connects, never says hello
        started = time.monotonic()
        assert request(url, pki, password=PASSWORD)[0] == 200
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(("content", "problem"), [
    ("prometheus:plaintext-password\n", "line 1: expected user:pbkdf2-sha256$"),
    ("# nobody\n", "names no user"),
    ("prometheus:pbkdf2-sha256$x$salt$hash\n", "line 1"),
])
def test_unusable_credentials_files_are_refused_without_echoing_them(tmp_path: Path, content: str,
                                                                     problem: str) -> None:
    path = tmp_path / "users"
    path.write_text(content)
    with pytest.raises(EndpointConfigError) as refused:
        BasicAuth.from_file(path)
    assert problem in str(refused.value) and "plaintext-password" not in str(refused.value)
    with pytest.raises(EndpointConfigError, match="cannot read"):
        BasicAuth.from_file(tmp_path / "missing")


def test_tls_needs_both_files(pki: ThrowawayPki) -> None:
    with pytest.raises(EndpointConfigError, match="go together"):
        metrics_server.serve(lambda timeout_s: BODY, "127.0.0.1", 0, tls_cert=pki.cert_pem)
    with pytest.raises(EndpointConfigError, match="cannot load"):
        metrics_server.serve(lambda timeout_s: BODY, "127.0.0.1", 0, tls_cert=pki.cert_pem, tls_key=pki.ca_pem)


def test_hash_tool_takes_the_password_from_stdin_not_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "streaming.metrics.server", "alice"], input="s3cret\n",
                            capture_output=True, text=True, timeout=60, check=True)
    line = result.stdout.strip()
    assert line.startswith("alice:pbkdf2-sha256$") and "s3cret" not in line
    path = tmp_path / "users"
    path.write_text(line + "\n")
    auth = BasicAuth.from_file(path)
    header: Any = "Basic " + b64encode(b"alice:s3cret").decode()
    assert auth.allows(header) and not auth.allows("Basic " + b64encode(b"alice:other").decode())
    assert not auth.allows(None) and not auth.allows("Bearer x") and not auth.allows("Basic !!!")


def test_job_options_take_the_tls_files_as_a_pair(pki: ThrowawayPki) -> None:
    from streaming.options import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b:9092", "--metrics-tls-cert", str(pki.cert_pem)])
    options = parse_args(["--bootstrap-server", "b:9092", "--metrics-tls-cert", str(pki.cert_pem),
                          "--metrics-tls-key", str(pki.key_pem), "--metrics-basic-auth-file", "/etc/users"])
    assert (options.metrics.tls_key, options.metrics.basic_auth_file) == (pki.key_pem, Path("/etc/users"))


def test_probes_answer_without_credentials_and_without_rendering(pki: ThrowawayPki, users_file: Path) -> None:
    renders: list[float] = []
    state = {"ready": (False, "catching up: 812 records behind the offsets topic")}

    def render(timeout_s: float) -> bytes:
        renders.append(timeout_s)
        return BODY

    server = metrics_server.serve(render, "127.0.0.1", 0, tls_cert=pki.cert_pem, tls_key=pki.key_pem,
                                  basic_auth_file=users_file, healthy=lambda: (True, "ok"),
                                  ready=lambda: state["ready"])
    base = f"https://127.0.0.1:{server.server_port}"
    try:
        assert request(f"{base}/-/healthy", pki)[::2] == (200, b"ok\n")
        status, headers, body = request(f"{base}/-/ready", pki)
        assert (status, body) == (503, b"catching up: 812 records behind the offsets topic\n")
        assert headers["Cache-Control"] == "no-store"
        state["ready"] = (True, "caught up")
        assert request(f"{base}/-/ready", pki)[::2] == (200, b"caught up\n")
        assert request(f"{base}/-/ready", pki, method="HEAD")[::2] == (200, b"")
        assert request(f"{base}/-/ready", pki, method="POST")[0] == 405
        assert request(f"{base}/metrics", pki)[0] == 401  # the metrics themselves still need credentials
        assert request(f"{base}/-/other", pki)[0] == 404
        assert renders == []
    finally:
        server.shutdown()
        server.server_close()

"""The metrics port: ``/metrics`` read-only, optionally behind TLS and HTTP basic auth, and two probes.

Kept apart from the exporter, which only stores and renders: this module decides who may read
the text and over what. Every request is a read (GET or HEAD; anything else is answered 405),
so exposing the port never lets a client change the job.

``/-/healthy`` and ``/-/ready`` answer from two cheap checks the job passes in (never by
rendering the exposition, which at 100,000 groups takes seconds): 200 or 503 with a one-line
reason. Like Prometheus' own endpoints of the same names they need no credentials (a kubelet
probe carries none) and say nothing but that line.

* TLS (``--metrics-tls-cert``/``--metrics-tls-key``, PEM): each connection's handshake runs in
  that connection's thread, so a client that stalls mid-handshake cannot block the others.
* Basic auth (``--metrics-basic-auth-file``): one ``user:hash`` a line, the hash PBKDF2-SHA256
  as written by ``python -m streaming.metrics.server USER`` (the password is read from the
  terminal or stdin, never from the command line). Passwords are never stored or logged;
  a credential once verified is remembered by its SHA-256 only, so each scrape does not pay
  the key derivation again.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import getpass
import gzip
import hashlib
import hmac
import logging
import os
import secrets
import ssl
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger(__name__)

SCHEME = "pbkdf2-sha256"
ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256
# A client gets this long to finish its handshake and request; the endpoint is scraped, not browsed.
CONNECTION_TIMEOUT_S = 30
# Prometheus sends each scrape's timeout (X-Prometheus-Scrape-Timeout-Seconds); a scrape without it is
# given Prometheus's default scrape_timeout.
DEFAULT_SCRAPE_TIMEOUT_S = 10.0
_REMEMBERED = 64  # verified credentials kept (by digest) so scrapes skip the key derivation


class EndpointConfigError(ValueError):
    """A TLS or credentials file the endpoint cannot use; the message names the file, never a secret."""


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    """``pbkdf2-sha256$ITERATIONS$SALT$HASH`` (base64), the form the credentials file holds."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{SCHEME}${iterations}${_b64(salt)}${_b64(digest)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


class BasicAuth:
    """The users allowed to scrape, from a ``user:hash`` file."""

    def __init__(self, users: dict[str, tuple[int, bytes, bytes]]) -> None:
        self._users = users
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        # Unknown users cost a derivation as well: response time does not tell which names exist.
        self._decoy = (ITERATIONS, secrets.token_bytes(16), secrets.token_bytes(32))

    @classmethod
    def from_file(cls, path: Path) -> BasicAuth:
        users: dict[str, tuple[int, bytes, bytes]] = {}
        try:
            text = path.read_text()
        except OSError as exc:
            raise EndpointConfigError(f"cannot read the credentials file {path}: {exc.strerror}") from None
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, _, hashed = line.partition(":")
            parts = hashed.split("$")
            try:
                if len(parts) != 4 or parts[0] != SCHEME or not user:
                    raise ValueError
                users[user] = (int(parts[1]), _unb64(parts[2]), _unb64(parts[3]))
            except (ValueError, binascii.Error):
                raise EndpointConfigError(
                    f"{path} line {number}: expected user:{SCHEME}$ITERATIONS$SALT$HASH "
                    "(write it with python -m streaming.metrics_server USER)") from None
        if not users:
            raise EndpointConfigError(f"{path} names no user: nobody could scrape")
        return cls(users)

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries a known user's password."""
        if not authorization or not authorization.startswith("Basic "):
            return False
        remembered = hashlib.sha256(authorization.encode()).digest()
        with self._lock:
            if remembered in self._verified:
                self._verified.move_to_end(remembered)
                return True
        try:
            user, sep, password = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        iterations, salt, expected = self._users.get(user, self._decoy)
        derived = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        if not (sep and user in self._users and hmac.compare_digest(derived, expected)):
            return False
        with self._lock:
            self._verified[remembered] = None
            while len(self._verified) > _REMEMBERED:
                self._verified.popitem(last=False)
        return True


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context (TLS 1.2 or later) from PEM certificate chain and key files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise EndpointConfigError(f"cannot load the metrics TLS certificate {cert} and key {key}: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
    return context


Check = Callable[[], tuple[bool, str]]  # (passes, one-line reason)
Render = Callable[[float], bytes]  # the exposition, given the scrape's timeout in seconds
PROBES = ("/-/healthy", "/-/ready")


def _always() -> tuple[bool, str]:
    return True, "ok"


def scrape_timeout(environ: dict[str, Any]) -> float:
    """The scrape's timeout as its scraper sent it; DEFAULT_SCRAPE_TIMEOUT_S when absent or not a positive number."""
    try:
        timeout = float(environ.get("HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS", ""))
    except ValueError:
        return DEFAULT_SCRAPE_TIMEOUT_S
    return timeout if 0 < timeout < float("inf") else DEFAULT_SCRAPE_TIMEOUT_S


def metrics_app(render: Render, auth: BasicAuth | None = None, healthy: Check = _always,
                ready: Check = _always) -> Callable[..., Iterable[bytes]]:
    """The WSGI application: ``/metrics`` (and ``/``) for GET and HEAD, gzip when asked; the probes."""
    probes = dict(zip(PROBES, (healthy, ready), strict=True))

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path not in ("/", "/metrics", *PROBES):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics serves the metrics, /-/healthy and /-/ready the probes\n"]
        method = environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"read-only endpoint\n"]
        if path in probes:
            passes, reason = probes[path]()
            start_response("200 OK" if passes else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")])
            return [b""] if method == "HEAD" else [f"{reason}\n".encode()]
        if auth is not None and not auth.allows(environ.get("HTTP_AUTHORIZATION")):
            challenge = 'Basic realm="rebalance-monitor", charset="UTF-8"'
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", challenge)])
            return [b"credentials required\n"]
        started = time.monotonic()
        body = render(scrape_timeout(environ))
        headers = [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        headers.append(("X-Render-Seconds", f"{time.monotonic() - started:.3f}"))
        start_response("200 OK", headers)
        return [b""] if method == "HEAD" else [body]

    return app


def serve(render: Render, host: str = "0.0.0.0", port: int = 0, *, tls_cert: Path | None = None,
          tls_key: Path | None = None, basic_auth_file: Path | None = None, healthy: Check = _always,
          ready: Check = _always) -> WSGIServer:
    """Serve ``render(timeout)`` (each scrape's own timeout) from a daemon thread; ``server_port`` is the bound port.

    Files are read here, before the port opens, so a bad one stops the job at start-up.
    """
    if (tls_cert is None) != (tls_key is None):
        raise EndpointConfigError("the metrics TLS certificate and key go together")
    tls = tls_context(tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None
    auth = BasicAuth.from_file(basic_auth_file) if basic_auth_file is not None else None
    if auth is not None and tls is None and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("metrics basic auth without TLS: passwords cross the network in clear text; "
                    "add --metrics-tls-cert and --metrics-tls-key")
    server = make_server(host, port, metrics_app(render, auth, healthy, ready), _ThreadingServer,
                         handler_class=_QuietHandler)
    assert isinstance(server, _ThreadingServer)
    server.tls = tls
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http").start()
    return server


class MetricsServer:
    """The endpoint as a component (see :mod:`streaming.lifecycle`): the port opens at :meth:`start`."""

    name = "metrics-server"

    def __init__(self, render: Render, host: str = "0.0.0.0", port: int = 0, *,
                 tls_cert: Path | None = None, tls_key: Path | None = None,
                 basic_auth_file: Path | None = None, healthy: Check = _always, ready: Check = _always) -> None:
        self._render = render
        self._host, self._port = host, port
        self._tls_cert, self._tls_key, self._basic_auth_file = tls_cert, tls_key, basic_auth_file
        self._healthy, self._ready = healthy, ready
        self._server: WSGIServer | None = None
        self.port: int | None = None  # the bound port once started (so port 0 works)

    def start(self) -> None:
        self._server = serve(self._render, self._host, self._port, tls_cert=self._tls_cert, tls_key=self._tls_key,
                             basic_auth_file=self._basic_auth_file, healthy=self._healthy, ready=self._ready)
        self.port = self._server.server_port

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT_S)
        with self.tls.wrap_socket(request, server_side=True) as secured:  # handshake in this thread
            super().finish_request(secured, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed handshake or a client gone mid-request: one line, not a traceback on stderr.
        log.debug("metrics request from %s failed: %s", client_address, sys.exc_info()[1])


class _QuietHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    """Print a credentials-file line for ``USER``; the password comes from the terminal or stdin."""
    parser = argparse.ArgumentParser(prog="python -m streaming.metrics.server",
                                     description="Print a --metrics-basic-auth-file line for USER.")
    parser.add_argument("user")
    args = parser.parse_args(argv)
    if ":" in args.user:
        parser.error("a user name cannot hold ':'")
    password = getpass.getpass() if os.isatty(0) else sys.stdin.readline().rstrip("\n")
    if not password:
        parser.error("empty password")
    print(f"{args.user}:{hash_password(password)}")


if __name__ == "__main__":
    main()

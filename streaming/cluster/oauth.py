"""OAUTHBEARER tokens for the job's kafka-python clients, from the settings Spark's Kafka source takes.

Spark's source (the Java client) logs in with Kafka's own ``OAuthBearerLoginModule`` and a login
callback handler; kafka-python needs an object whose ``token()`` returns the token instead. This
module builds that object from the same ``kafka.*`` options, so both clients log in as the same
principal:

* no ``sasl.login.callback.handler.class`` (or Kafka's unsecured handler): Kafka's *unsecured* login,
  an unsigned JWT (``alg: none``) made locally from the JAAS options
  ``unsecuredLoginStringClaim_sub`` (required: the principal), ``unsecuredLoginStringClaim_<name>``,
  ``unsecuredLoginNumberClaim_<name>``, ``unsecuredLoginListClaim_<name>``,
  ``unsecuredLoginPrincipalClaimName``, ``unsecuredLoginScopeClaimName``,
  ``unsecuredLoginLifetimeSeconds`` and ``unsecuredLoginExtension_<name>``. For tests and
  development only: a broker that accepts these accepts anyone's;
* ``org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler`` (OIDC): the
  client credentials grant, POSTed to ``sasl.oauthbearer.token.endpoint.url`` with the JAAS
  options ``clientId`` and ``clientSecret`` (HTTP basic authentication, as Kafka sends them;
  ``sasl.oauthbearer.header.urlencode`` honoured) and the optional ``scope``; SASL extensions from
  ``extension_<name>``; the endpoint's CA from the JAAS options ``ssl.truststore.location`` (type
  PEM) and ``ssl.endpoint.identification.algorithm``; timeouts from ``sasl.login.connect.timeout.ms``
  and ``sasl.login.read.timeout.ms``. A ``file:`` URL names a file holding the token (Kafka reads it
  the same way), read again as it nears expiry. A token is kept until ``sasl.login.refresh.window.factor``
  (0.8, Kafka's default) of its lifetime has passed.

No token, secret or JAAS value is ever logged or put in a message or a ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from streaming.cluster.client import UnsupportedKafkaOption, jaas_options

log = logging.getLogger(__name__)

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
# The same handler under its Kafka 3.1-3.3 name (still in kafka-clients 3.9, gone in 4.0).
_OIDC_HANDLERS = {OIDC_HANDLER, "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"}
UNSECURED_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredLoginCallbackHandler")
MSK_OAUTH_HANDLER = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_REFRESH_FACTOR = 0.8
UNKNOWN_LIFETIME_S = 60.0  # a token whose expiry nothing states is fetched again this often


class TokenError(RuntimeError):
    """No token: ``refused`` when the endpoint turned the credentials down (retrying cannot help),
    not when it could not be reached or failed (it may come back)."""

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


class _CachedTokenProvider(AbstractTokenProvider):
    """A token kept until ``refresh_factor`` of its lifetime has passed; thread-safe (every kafka-python
    client of the job shares one provider, and each may log in from its own thread)."""

    def __init__(self, extensions: Mapping[str, str], refresh_factor: float = DEFAULT_REFRESH_FACTOR,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._extensions = dict(extensions)
        self._refresh_factor = refresh_factor
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0
        self._expires_at = 0.0

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if self._token is not None and now < self._refresh_at:
                return self._token
            try:
                token, lifetime_s = self._fetch(now)
            except TokenError as exc:
                if self._token is not None and now < self._expires_at:
                    log.warning("OAUTHBEARER: could not renew the token (%s); the current one is valid for %.0fs more",
                                exc, self._expires_at - now)
                    return self._token
                raise
            self._token = token
            self._expires_at = now + lifetime_s
            self._refresh_at = now + lifetime_s * self._refresh_factor
            return token

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def secrets(self) -> list[str]:
        """Values an error message must not show (the caller redacts them)."""
        return []

    def _fetch(self, now: float) -> tuple[str, float]:
        raise NotImplementedError

    def __repr__(self) -> str:  # kafka-python logs its configuration at DEBUG: never the secrets
        return f"<{type(self).__name__}>"


class UnsecuredTokenProvider(_CachedTokenProvider):
    """Kafka's unsecured login (``OAuthBearerUnsecuredLoginCallbackHandler``): an unsigned JWT."""

    def __init__(self, claims: Mapping[str, Any], lifetime_s: float, extensions: Mapping[str, str],
                 refresh_factor: float = DEFAULT_REFRESH_FACTOR, clock: Callable[[], float] = time.time) -> None:
        super().__init__(extensions, refresh_factor, clock)
        self._claims = dict(claims)
        self._lifetime_s = lifetime_s

    def _fetch(self, now: float) -> tuple[str, float]:
        # As Kafka's handler writes it: iat in seconds (a decimal), exp = iat + lifetime, no signature.
        claims = {"exp": now + self._lifetime_s, "iat": now, **self._claims}
        return unsecured_jwt(claims), self._lifetime_s


def unsecured_jwt(claims: Mapping[str, Any]) -> str:
    """An unsigned JWS compact serialization: header ``{"alg":"none"}``, the claims, an empty signature."""
    def part(value: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part(claims)}."


class ClientCredentialsTokenProvider(_CachedTokenProvider):
    """OIDC client credentials: a token from the identity provider's token endpoint (``http(s):``), or
    one read from a file (``file:``), as Kafka's ``OAuthBearerLoginCallbackHandler`` gets it."""

    def __init__(self, url: str, client_id: str | None, client_secret: str | None, scope: str | None = None, *,
                 extensions: Mapping[str, str] | None = None, urlencode_header: bool = False,
                 cafile: str | None = None, check_hostname: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
                 refresh_factor: float = DEFAULT_REFRESH_FACTOR, clock: Callable[[], float] = time.time) -> None:
        super().__init__(extensions or {}, refresh_factor, clock)
        self.url = url
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._urlencode_header = urlencode_header
        self._cafile = cafile
        self._check_hostname = check_hostname
        self._timeout_s = timeout_s

    def secrets(self) -> list[str]:
        return [self._client_secret] if self._client_secret else []

    def _fetch(self, now: float) -> tuple[str, float]:
        if urllib.parse.urlsplit(self.url).scheme.lower() == "file":
            return self._read_file(now)
        body = {"grant_type": "client_credentials", **({"scope": self._scope} if self._scope else {})}
        request = urllib.request.Request(self.url, data=urllib.parse.urlencode(body).encode(), method="POST", headers={
            "Authorization": self._authorization(), "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json", "Cache-Control": "no-cache"})
        context = None
        if urllib.parse.urlsplit(self.url).scheme.lower() == "https":
            context = ssl.create_default_context(cafile=self._cafile)
            if not self._check_hostname:
                context.check_hostname = False
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s, context=context) as response:
                answer = response.read(1 << 20)
        except urllib.error.HTTPError as exc:
            reason = _oauth_error(exc.read(4096))
            # 400 invalid_client/invalid_grant, 401, 403: the credentials; a 5xx may pass.
            raise TokenError(self._redacted(f"token endpoint {self.url} answered HTTP {exc.code}{reason}; check the "
                                            "clientId, clientSecret and scope in kafka.sasl.jaas.config"),
                             refused=400 <= exc.code < 500) from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            raise TokenError(f"token endpoint {self.url} could not be reached: {type(why).__name__}: {why}",
                             refused=isinstance(why, ssl.SSLError)) from None
        try:
            parsed = json.loads(answer)
            token = parsed["access_token"]
            if not isinstance(token, str) or not token:
                raise ValueError("empty")
        except (ValueError, KeyError, TypeError):
            raise TokenError(f"token endpoint {self.url} answered without an access_token (not the OAuth JSON "
                             "answer of a client credentials grant)", refused=False) from None
        expires_in = parsed.get("expires_in")
        return token, _lifetime(token, now, float(expires_in) if isinstance(expires_in, int | float) else None)

    def _read_file(self, now: float) -> tuple[str, float]:
        path = urllib.request.url2pathname(urllib.parse.urlsplit(self.url).path)
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as exc:
            raise TokenError(f"token file {path} (sasl.oauthbearer.token.endpoint.url) could not be read: "
                             f"{exc.strerror or exc}", refused=False) from None
        if not token:
            raise TokenError(f"token file {path} (sasl.oauthbearer.token.endpoint.url) is empty", refused=False)
        return token, _lifetime(token, now, None)

    def _authorization(self) -> str:
        client_id, secret = self._client_id or "", self._client_secret or ""
        if self._urlencode_header:
            client_id, secret = urllib.parse.quote_plus(client_id), urllib.parse.quote_plus(secret)
        return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()

    def _redacted(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text


def _oauth_error(body: bytes) -> str:
    """``: error (description)`` from an RFC 6749 error answer, else nothing (a body may echo anything)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict) or not isinstance(parsed.get("error"), str):
        return ""
    description = parsed.get("error_description")
    described = f" ({description[:200]})" if isinstance(description, str) and description else ""
    return f": {parsed['error'][:100]}{described}"


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWS compact token, unverified; empty when it is no JWT (an opaque token)."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


def _lifetime(token: str, now: float, expires_in: float | None) -> float:
    """Seconds the token stays valid: the sooner of ``expires_in`` and the JWT's ``exp``."""
    exp = jwt_claims(token).get("exp")
    known = [s for s in (expires_in, exp - now if isinstance(exp, int | float) else None) if s is not None]
    return max(0.0, min(known)) if known else UNKNOWN_LIFETIME_S


def token_provider(options: Mapping[str, str]) -> _CachedTokenProvider:
    """The token provider the ``kafka.*`` options (names without ``kafka.``) describe for OAUTHBEARER.

    Raises :class:`UnsupportedKafkaOption` naming the missing or unsupported setting, never a value.
    """
    jaas = options.get("sasl.jaas.config", "")
    module, values = jaas_options(jaas)
    if not module:
        raise UnsupportedKafkaOption(f"kafka.sasl.mechanism=OAUTHBEARER needs kafka.sasl.jaas.config "
                                     f"({LOGIN_MODULE} required ...;)")
    if module.rsplit(".", 1)[-1] != "OAuthBearerLoginModule":
        raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: sasl.mechanism=OAUTHBEARER takes {LOGIN_MODULE}, "
                                     f"not {module.rsplit('.', 1)[-1]}")
    handler = options.get("sasl.login.callback.handler.class", "").strip()
    refresh = _number(options, "sasl.login.refresh.window.factor", DEFAULT_REFRESH_FACTOR)
    if not 0.5 <= refresh <= 1.0:  # Kafka's own bounds
        raise UnsupportedKafkaOption("kafka.sasl.login.refresh.window.factor must be between 0.5 and 1.0")
    if handler in ("", UNSECURED_HANDLER):
        return _unsecured(values, refresh)
    if handler in _OIDC_HANDLERS:
        return _client_credentials(options, values, refresh)
    if handler == MSK_OAUTH_HANDLER:
        raise UnsupportedKafkaOption(
            f"kafka.sasl.login.callback.handler.class={MSK_OAUTH_HANDLER}: the job's own clients (kafka-python) "
            "cannot make Amazon MSK's IAM OAUTHBEARER token; use kafka.sasl.mechanism=AWS_MSK_IAM with "
            "software.amazon.msk.auth.iam.IAMLoginModule and IAMClientCallbackHandler instead (docs/security.md)")
    raise UnsupportedKafkaOption(
        f"kafka.sasl.login.callback.handler.class={handler}: the job's own clients (kafka-python) support Kafka's "
        f"OIDC handler ({OIDC_HANDLER}) and the unsecured default only")


def _unsecured(values: Mapping[str, str], refresh: float) -> UnsecuredTokenProvider:
    principal = values.get("unsecuredLoginPrincipalClaimName", "sub")
    claims: dict[str, Any] = {}
    for name, value in values.items():
        if name.startswith("unsecuredLoginStringClaim_"):
            claims[name.removeprefix("unsecuredLoginStringClaim_")] = value
        elif name.startswith("unsecuredLoginNumberClaim_"):
            try:
                claims[name.removeprefix("unsecuredLoginNumberClaim_")] = json.loads(value)
            except ValueError:
                raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: {name} is not a number") from None
        elif name.startswith("unsecuredLoginListClaim_"):
            # Kafka's form: the first character is the delimiter of the rest.
            claims[name.removeprefix("unsecuredLoginListClaim_")] = (
                [item for item in value[1:].split(value[0]) if item] if value else [])
    if not isinstance(claims.get(principal), str) or not claims[principal]:
        raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: the unsecured OAUTHBEARER login needs "
                                     f"unsecuredLoginStringClaim_{principal} (the principal's name)")
    for reserved in ("exp", "iat"):
        if reserved in claims:
            raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: the {reserved} claim is set by the login itself")
    try:
        lifetime = float(values.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise UnsupportedKafkaOption("kafka.sasl.jaas.config: unsecuredLoginLifetimeSeconds is not a number") from None
    extensions = {name.removeprefix("unsecuredLoginExtension_"): value for name, value in values.items()
                  if name.startswith("unsecuredLoginExtension_")}
    return UnsecuredTokenProvider(claims, lifetime, extensions, refresh)


def _client_credentials(options: Mapping[str, str], values: Mapping[str, str],
                        refresh: float) -> ClientCredentialsTokenProvider:
    url = options.get("sasl.oauthbearer.token.endpoint.url", "").strip()
    if not url:
        raise UnsupportedKafkaOption(f"kafka.sasl.login.callback.handler.class={OIDC_HANDLER} needs "
                                     "kafka.sasl.oauthbearer.token.endpoint.url (the identity provider's token "
                                     "endpoint)")
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https", "file"):
        raise UnsupportedKafkaOption("kafka.sasl.oauthbearer.token.endpoint.url must be an http, https or file URL")
    if scheme != "file":
        missing = [name for name in ("clientId", "clientSecret") if not values.get(name)]
        if missing:
            raise UnsupportedKafkaOption(f"kafka.sasl.jaas.config: the OIDC client credentials login needs "
                                         f"{' and '.join(missing)} in the {LOGIN_MODULE} options")
    cafile = None
    if values.get("ssl.truststore.location"):
        kind = values.get("ssl.truststore.type", "JKS").strip().upper()
        if kind != "PEM":
            raise UnsupportedKafkaOption(
                f"kafka.sasl.jaas.config: ssl.truststore.type={kind} for the token endpoint: the job's own clients "
                "(kafka-python) read PEM only; convert it and set ssl.truststore.type=\"PEM\" there")
        cafile = values["ssl.truststore.location"]
    timeout_ms = max(_number(options, "sasl.login.connect.timeout.ms", 0),
                     _number(options, "sasl.login.read.timeout.ms", 0))
    extensions = {name.removeprefix("extension_"): value for name, value in values.items()
                  if name.startswith("extension_")}
    return ClientCredentialsTokenProvider(
        url, values.get("clientId"), values.get("clientSecret"), values.get("scope") or None,
        extensions=extensions, cafile=cafile,
        check_hostname=values.get("ssl.endpoint.identification.algorithm", "https").strip() != "",
        urlencode_header=options.get("sasl.oauthbearer.header.urlencode", "false").strip().lower() == "true",
        timeout_s=timeout_ms / 1000 if timeout_ms > 0 else DEFAULT_TIMEOUT_S, refresh_factor=refresh)


def _number(options: Mapping[str, str], name: str, default: float) -> float:
    if name not in options:
        return default
    try:
        return float(options[name])
    except ValueError:
        raise UnsupportedKafkaOption(f"kafka.{name} is not a number") from None

"""A real single-node Kafka (KRaft, combined broker + controller) run from the Maven jars.

Used by ``make run`` / ``make kafka-up`` (fixed port, data under .local/) and by the tests
(free ports, data in a temp dir). Start blocks until the broker answers metadata requests;
stop leaves no process or listening port behind.

``scram_users`` adds a SASL_SSL listener (SCRAM-SHA-512 over TLS) beside the plaintext one,
with a throwaway CA and broker certificate made at start (:func:`make_throwaway_pki`) and the
users created by Kafka's own storage tool at format time; the inter-broker and controller
listeners stay plaintext.

``oauthbearer=True`` adds a SASL_PLAINTEXT listener taking OAUTHBEARER in Kafka's unsecured-token
mode (unsigned JWTs, validated by Kafka's default server callback): for tests only, since any client
can name any principal there. Off by default. With ``oauth_jwks_url`` as well, the listener takes only
signed JWTs instead, checked against that JWKS (an ``http:`` or ``file:`` URL) by Kafka's
``OAuthBearerValidatorCallbackHandler``, as a broker secured by an OIDC identity provider does.

``authorizer=True`` turns on KRaft's ACL authorizer (``StandardAuthorizer``) with the plaintext
listeners' principal (``User:ANONYMOUS``: the controller, the inter-broker link and the test's own
admin clients) as the only super user: the SCRAM users can do only what ACLs grant them.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from testbed.jvm import PROJECT_ROOT, kafka_jars, kafka_version

KAFKA_CONFIG_DIR = PROJECT_ROOT / "deploy" / "kafka"
DEFAULT_STATE_DIR = PROJECT_ROOT / ".local" / "kafka"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTHBEARER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
# Kafka 4 refuses every OAuth URL (JWKS, token endpoint) not listed in this JVM system property.
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAINTEXT_PRINCIPAL = "User:ANONYMOUS"


@dataclass(frozen=True)
class ThrowawayPki:
    """Files of a throwaway CA and one server certificate signed by it (127.0.0.1 and localhost)."""

    ca_pem: Path  # the CA certificate: what clients trust
    cert_pem: Path  # the server certificate
    key_pem: Path  # its private key, unencrypted PKCS#8
    keystore_p12: Path  # key and chain as PKCS#12, for a JVM server
    keystore_password: str


def make_throwaway_pki(directory: Path, common_name: str = "localhost") -> ThrowawayPki:
    """A fresh CA and a server certificate for loopback, written under ``directory``.

    Tests only: the keys are fresh per call and unencrypted on disk (the PKCS#12 copy has a
    random password, since a JVM key store needs one).
    """
    import datetime
    import ipaddress
    import secrets

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2))

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("rebalance-monitor test CA")).issuer_name(name(
          "rebalance-monitor test CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(validity[0]).not_valid_after(validity[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                       x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(name(common_name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(validity[0]).not_valid_after(validity[1])
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    pki = ThrowawayPki(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                  directory / "server.p12", secrets.token_urlsafe(16))
    pki.ca_pem.write_bytes(ca.public_bytes(pem))
    pki.cert_pem.write_bytes(cert.public_bytes(pem))
    pki.key_pem.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    pki.keystore_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", key, cert, [ca], serialization.BestAvailableEncryption(pki.keystore_password.encode())))
    return pki


def jaas_config(user: str, password: str) -> str:
    """A client's ``sasl.jaas.config`` for SCRAM, quoted as Kafka's JAAS parser wants."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{SCRAM_LOGIN_MODULE} required username={quoted(user)} password={quoted(password)};"


def _is_kafka_3(version: str) -> bool:
    return version.split(".")[0] == "3"


def java_command(version: str, main_class: str, args: list[str], *, tools: bool, heap: str = "256m") -> list[str]:
    """The java command line for a Kafka main class at ``version`` with logging configured."""
    jars = kafka_jars(version)
    name = "tools-log4j2.properties" if tools else "log4j2.properties"
    logging = [f"-Dlog4j2.configurationFile={KAFKA_CONFIG_DIR / name}"]
    # Tools are short-lived: a small collector and the quick JIT tier start them fastest.
    jvm = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if tools else ["-XX:+UseG1GC"]
    return ["java", f"-Xmx{heap}", *jvm, "-Djava.awt.headless=true", *logging,
            "-cp", f"{jars}/*", main_class, *args]


def acl_command(version: str | None = None) -> str:
    """The main class of Kafka's ``kafka-acls`` tool (it moved to the tools jar in 4.0)."""
    return "kafka.admin.AclCommand" if _is_kafka_3(version or kafka_version()) else "org.apache.kafka.tools.AclCommand"


def run_kafka_tool(main_class: str, args: list[str], version: str | None = None,
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's own command-line tools (e.g. the consumer-groups command)."""
    cmd = java_command(version or kafka_version(), main_class, args, tools=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class LocalKafka:
    """One KRaft node. ``port=0`` picks free ports (tests); a fixed port suits the demo."""

    def __init__(self, state_dir: Path, port: int = 0, version: str | None = None,
                 extra_config: dict[str, str] | None = None, heap: str = "768m",
                 scram_users: dict[str, str] | None = None, authorizer: bool = False,
                 oauthbearer: bool = False, oauth_jwks_url: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.version = version or kafka_version()
        self.port = port or free_port()
        self.controller_port = free_port() if port == 0 else port + 1
        self.extra_config = extra_config or {}
        self.heap = heap
        # user -> password on the SASL_SSL listener; none: no such listener.
        self.scram_users = dict(scram_users or {})
        self.secure_port: int | None = None
        if self.scram_users:
            self.secure_port = free_port() if port == 0 else port + 2
        self.authorizer = authorizer
        # A SASL_PLAINTEXT listener taking Kafka's unsecured OAUTHBEARER tokens; none: no such listener.
        self.oauth_port: int | None = None
        if oauthbearer:
            self.oauth_port = free_port() if port == 0 else port + 3
        self.oauth_jwks_url = oauth_jwks_url
        self.pki: ThrowawayPki | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.start_to_ready_seconds: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_bootstrap(self) -> str:
        """The SASL_SSL listener's address (``scram_users`` given)."""
        if self.secure_port is None:
            raise RuntimeError("this broker has no SASL_SSL listener: pass scram_users")
        return f"127.0.0.1:{self.secure_port}"

    @property
    def oauth_bootstrap(self) -> str:
        """The SASL_PLAINTEXT OAUTHBEARER listener's address (``oauthbearer=True``)."""
        if self.oauth_port is None:
            raise RuntimeError("this broker has no OAUTHBEARER listener: pass oauthbearer=True")
        return f"127.0.0.1:{self.oauth_port}"

    @staticmethod
    def client_oauth_options(principal: str) -> dict[str, str]:
        """Java client options reaching the OAUTHBEARER listener as ``principal`` (an unsecured token:
        Kafka's login module makes it from the JAAS claim, no identity provider involved)."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="{principal}";',
        }

    def client_security_options(self, user: str, password: str | None = None) -> dict[str, str]:
        """Java client options reaching the SASL_SSL listener as ``user`` (their password by default)."""
        pki = self._ensure_pki()
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": jaas_config(user, self.scram_users[user] if password is None else password),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
        }

    def _ensure_pki(self) -> ThrowawayPki:
        if self.pki is None:
            self.pki = make_throwaway_pki(self.state_dir / "tls")
        return self.pki

    @property
    def _ports(self) -> tuple[int, ...]:
        return tuple(p for p in (self.port, self.controller_port, self.secure_port, self.oauth_port)
                     if p is not None)

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    def server_properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "50",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Rebalances happen as soon as members ask; tests and the demo want them quick.
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "3000",
            "group.consumer.min.session.timeout.ms": "3000",
            "group.consumer.session.timeout.ms": "10000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.heartbeat.interval.ms": "1000",
        }
        if _is_kafka_3(self.version):
            # 3.9 ships the KIP-848 protocol as a preview that must be switched on.
            props["group.coordinator.rebalance.protocols"] = "classic,consumer"
        if self.scram_users:
            props.update(self._secure_listener_properties())
        if self.oauth_port is not None:
            props.update(self._oauth_listener_properties(props))
        if self.authorizer:
            # No ACL means denied (allow.everyone.if.no.acl.found stays false).
            props.update({"authorizer.class.name": AUTHORIZER_CLASS, "super.users": PLAINTEXT_PRINCIPAL})
        props.update(self.extra_config)
        return props

    def _secure_listener_properties(self) -> dict[str, str]:
        """A SASL_SSL listener on ``secure_port``; the other listeners keep their protocols."""
        pki = self._ensure_pki()
        listener = f"SASL_SSL://127.0.0.1:{self.secure_port}"
        prefix = "listener.name.sasl_ssl."
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},{listener},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},{listener}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config": f"{SCRAM_LOGIN_MODULE} required;",
            f"{prefix}ssl.keystore.type": "PKCS12",
            f"{prefix}ssl.keystore.location": str(pki.keystore_p12),
            f"{prefix}ssl.keystore.password": pki.keystore_password,
        }

    def _oauth_listener_properties(self, props: dict[str, str]) -> dict[str, str]:
        """A SASL_PLAINTEXT listener on ``oauth_port`` taking OAUTHBEARER only, added to ``props``' listeners.

        Without ``oauth_jwks_url`` no validator callback handler is named, so the broker takes Kafka's
        default, which accepts unsecured (``alg: none``) tokens; with it, Kafka's JWT validator, which
        refuses them. The login module's own claim only serves the broker as a client on this listener,
        which nothing uses."""
        listener = f"SASL_PLAINTEXT://127.0.0.1:{self.oauth_port}"
        prefix = "listener.name.sasl_plaintext."
        signed = {} if self.oauth_jwks_url is None else {
            f"{prefix}oauthbearer.sasl.server.callback.handler.class": OAUTHBEARER_VALIDATOR,
            "sasl.oauthbearer.jwks.endpoint.url": self.oauth_jwks_url,
        }
        return {
            **signed,
            "listeners": f"{props['listeners']},{listener}",
            "advertised.listeners": f"{props['advertised.listeners']},{listener}",
            "listener.security.protocol.map":
                f"{props['listener.security.protocol.map']},SASL_PLAINTEXT:SASL_PLAINTEXT",
            f"{prefix}sasl.enabled.mechanisms": "OAUTHBEARER",
            f"{prefix}oauthbearer.sasl.jaas.config":
                f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="admin";',
        }

    def _write_config(self) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        return path

    def _format_storage(self, config: Path) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # SCRAM credentials go into the metadata log with the format (KRaft's bootstrap records).
        scram = [arg for user, password in self.scram_users.items()
                 for arg in ("--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]")]
        cmd = java_command(self.version, "kafka.tools.StorageTool",
                           ["format", f"--cluster-id={cluster_id}", "--config", str(config), *scram], tools=True)
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"formatting Kafka storage failed:\n{result.stdout}\n{result.stderr}")

    def start(self, timeout: float = 90) -> float:
        """Start the broker and block until it serves metadata; return start-to-ready seconds."""
        for port in self._ports:
            if port_open(port):
                raise RuntimeError(f"port {port} is already in use; is another broker running?")
        config = self._write_config()
        started = time.monotonic()
        self._format_storage(config)
        cmd = java_command(self.version, "kafka.Kafka", [str(config)], tools=False, heap=self.heap)
        cmd.insert(1, f"-Dkafka.logs.dir={self.log_dir}")  # where log4j2.properties writes server.log
        if self.oauth_jwks_url is not None:
            cmd.insert(1, f"-D{OAUTH_ALLOWED_URLS}={self.oauth_jwks_url}")
        stdout = (self.log_dir / "stdout.log").open("ab")
        self.process = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        stdout.close()
        (self.state_dir / "broker.pid").write_text(str(self.process.pid))
        try:
            self._wait_ready(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_to_ready_seconds = time.monotonic() - started
        return self.start_to_ready_seconds

    def _wait_ready(self, deadline: float) -> None:
        from kafka import KafkaAdminClient

        last_error: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}; see {self.log_dir}")
            if all(port_open(port) for port in (self.port, self.secure_port, self.oauth_port) if port is not None):
                try:
                    admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
                    try:
                        if admin.describe_cluster()["brokers"]:
                            return
                    finally:
                        admin.close()
                except Exception as exc:  # not ready yet: any client error means retry
                    last_error = exc
            time.sleep(0.25)
        raise TimeoutError(f"broker not ready in time (last error: {last_error}); see {self.log_dir}")

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (controlled shutdown), then SIGKILL; wait until the ports are closed."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(port_open(port) for port in self._ports):
            time.sleep(0.1)
        (self.state_dir / "broker.pid").unlink(missing_ok=True)


def stop_pidfile(state_dir: Path, timeout: float = 30) -> bool:
    """Stop a broker started by ``up`` in another process; True when one was running."""
    pidfile = state_dir / "broker.pid"
    if not pidfile.exists():
        return False
    pid = int(pidfile.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/local-kafka", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "run"],
                        help="up: start in the background; down: stop it; run: foreground until Ctrl-C")
    parser.add_argument("--port", type=int, default=int(os.environ.get("KAFKA_PORT", "9092")))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    if args.action == "down":
        print("broker stopped" if stop_pidfile(args.state_dir) else "no broker was running")
        return 0
    broker = LocalKafka(args.state_dir, port=args.port)
    seconds = broker.start()
    print(f"Kafka {broker.version} ready at {broker.bootstrap} in {seconds:.1f}s "
          f"(data {broker.data_dir}, logs {broker.log_dir})", flush=True)
    if args.action == "up":
        broker.process = None  # leave it running; `down` stops it through the pid file
        return 0
    try:
        assert broker.process is not None
        broker.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

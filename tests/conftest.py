"""Shared fixtures: one real KRaft broker and one Spark session for the whole test run."""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from testbed.broker import LocalKafka, port_open
from testbed.workload import Admin, Member

_names = itertools.count()


def pytest_report_header(config: pytest.Config) -> str:
    from testbed.jvm import kafka_version, spark_version

    return f"kafka broker {kafka_version()}, spark {spark_version()}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalKafka]:
    broker = LocalKafka(tmp_path_factory.mktemp("kafka"))
    seconds = broker.start()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    message = f"Kafka {broker.version} broker start-to-ready: {seconds:.2f}s at {broker.bootstrap}"
    if reporter is not None:
        reporter.write_line(f"\n{message}")
    yield broker
    pid = broker.process.pid if broker.process else None
    broker.stop()
    leftovers = [port for port in (broker.port, broker.controller_port) if port_open(port)]
    alive = pid is not None and os.path.exists(f"/proc/{pid}")
    if leftovers or alive:
        raise RuntimeError(f"broker left behind: ports {leftovers}, process alive={alive}")
    if reporter is not None:
        reporter.write_line(f"Kafka broker stopped; ports {broker.port}/{broker.controller_port} closed")


@pytest.fixture(scope="session")
def admin(kafka_broker: LocalKafka) -> Iterator[Admin]:
    client = Admin(kafka_broker.bootstrap)
    yield client
    client.close()


PROMETHEUS_MAJORS = ("2", "3")  # Debian's 2.x package and Prometheus 3, which operators run now
BUILT_BIN = Path(__file__).resolve().parents[1] / "build" / "bin"


def missing(message: str) -> NoReturn:
    """Skip, or fail under CI (CI=true), where `make setup` must have installed what is missing."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def installed(tool: str) -> str:
    """The path of ``tool`` on PATH; missing, the test skips, or fails under CI (CI=true)."""
    path = shutil.which(tool)
    if path is None:
        missing(f"{tool} not on PATH: `make setup` installs it as root")
    return path


@functools.cache
def version_major(path: str) -> str | None:
    """The major version a Prometheus binary reports (``prometheus, version 2.42.0+ds ...``)."""
    result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    found = re.search(r"version (\d+)\.", result.stdout + result.stderr)
    return found.group(1) if found else None


def prometheus_tool(tool: str, major: str) -> str:
    """The path of ``tool`` (prometheus, promtool) of Prometheus ``major``: on PATH (Debian's 2.x) or in
    build/bin (3.x, built by `make prometheus3`); missing, the test skips, or fails under CI."""
    for path in (shutil.which(tool), str(BUILT_BIN / tool)):
        if path is not None and os.access(path, os.X_OK) and version_major(path) == major:
            return path
    hint = ("`make setup` installs it as root (Debian package prometheus)" if major == "2" else
            "`make prometheus3` (part of `make setup`) builds it into build/bin with Go")
    missing(f"{tool} {major}.x is neither on PATH nor in {BUILT_BIN}: {hint}")


# Module scope: a module's tests run on one major, then on the other, each setting up its own Prometheus once.
@pytest.fixture(scope="module", params=PROMETHEUS_MAJORS, ids=lambda major: f"prometheus{major}")
def promtool(request: pytest.FixtureRequest) -> str:
    return prometheus_tool("promtool", request.param)


@pytest.fixture
def unique() -> str:
    """A short name unique within the test run, for topics and groups."""
    return f"{int(time.time()) % 100000}-{next(_names)}"


@pytest.fixture
def members() -> Iterator[list[Member]]:
    """Collects the members a test starts and makes sure none outlives it."""
    started: list[Member] = []
    yield started
    for member in started:
        if member.running:
            member.crash()


@pytest.fixture(scope="session")
def kafka_jar_dir() -> Path:
    from testbed.jvm import kafka_jars

    return kafka_jars()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark session for every test that runs the job."""
    from streaming.job import spark_session
    from streaming.options import parse_args

    session = spark_session(parse_args(["--bootstrap-server", "unused", "--state-partitions", "2"]),
                            {"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def monitor(spark: object, kafka_broker: LocalKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The real monitor job, shared by a module's tests (their own group names; they read its /metrics). Not
    by the session: kept to its end, it folded every test's commits in the session's Spark on the same two
    cores as the jobs the later tests start (141 batches by the time a restart test read its log)."""
    from tests.support.monitor_helpers import start_monitor

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path_factory.mktemp("monitor"))
    yield job
    job.stop()


@pytest.fixture(scope="session")
def kip848_clients_supported(kafka_broker: LocalKafka) -> bool:
    """Whether the broker speaks the KIP-848 heartbeat our KIP-848 client needs.

    confluent-kafka (librdkafka) generates its own member ids, which takes ConsumerGroupHeartbeat
    v1 (KIP-1082, Kafka 4.0+); Kafka 3.9 offers only v0, its preview of the protocol.
    """
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        versions = client.api_versions().get(68)  # 68 = ConsumerGroupHeartbeat
    finally:
        client.close()
    return versions is not None and versions[1] >= 1


@pytest.fixture
def kip848(kip848_clients_supported: bool, kafka_broker: LocalKafka) -> None:
    """Skip a KIP-848 scenario on a broker whose heartbeat our KIP-848 client cannot speak."""
    if not kip848_clients_supported:
        pytest.skip(f"Kafka {kafka_broker.version} offers ConsumerGroupHeartbeat v0 only; confluent-kafka's "
                    "KIP-848 consumer needs v1 (KIP-1082, Kafka 4.0+)")

"""The container image, built from this checkout's files (``make image``; ``make test`` builds it
first), runs as deploy/k8s/deployment.yaml runs it (read-only root filesystem, a tmpfs /tmp, user
1000, every capability dropped, host network) against the suite's broker: ``/-/ready`` answers 200
and a consumer group the test creates shows on ``/metrics``."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.broker import LocalKafka, free_port
from testbed.image import DOCKERFILE, Container, http_get, image_exists, inputs_tag, podman
from testbed.workload import Admin, Member, start_members
from tests.conftest import installed, missing
from tests.support.exposition import parse, value

pytestmark = pytest.mark.slow

# A Spark JVM in a fresh container on a loaded two-core machine (about 20 s when idle).
READY_TIMEOUT_S = 240
GROUP_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from these inputs; missing (podman, or the build), the test skips, or fails under CI."""
    installed("podman")
    tag = inputs_tag()
    if not image_exists(tag):
        missing(f"{tag} is not in podman's store: `make image` builds it (as root; `make test` does)")
    return tag


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory the container's user can reach its /data through (pytest's own are root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="image-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_image_serves_a_real_group(image: str, kafka_broker: LocalKafka, admin: Admin, members: list[Member],
                                   unique: str, workdir: Path) -> None:
    topic, group = f"image-{unique}", f"image-group-{unique}"
    admin.create_topic(topic, 2)
    member = Member(kafka_broker.bootstrap, group, [topic], f"image-member-{unique}")
    members.append(member)
    start_members([member])

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    container = Container.deployed(image, f"rebalance-monitor-test-{os.getpid()}-{unique}", workdir,
                                   kafka_broker.bootstrap, port, cluster="test")
    started = time.monotonic()

    def wait(until: Callable[[], bool], timeout: float, what: str) -> float:
        """Seconds from ``podman run`` until ``until()`` holds; a container that stops or times out
        fails the test with its state and its log."""
        deadline = time.monotonic() + timeout
        while not until():
            state = container.state()
            if state != "running":
                pytest.fail(f"the container stopped ({state}) before {what}\n{container.logs()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {timeout:.0f}s ({time.monotonic() - started:.0f}s since podman run)"
                            f"\n{container.logs()}", pytrace=False)
            time.sleep(0.5)
        return time.monotonic() - started

    def generation() -> float | None:
        status, body = http_get(f"{base}/metrics")
        return value(parse(body.decode()), "kafka_consumergroup_generation", group=group, cluster="test") \
            if status == 200 else None

    try:
        container.start()
        ready = wait(lambda: http_get(f"{base}/-/ready")[0] == 200, READY_TIMEOUT_S, f"200 from {base}/-/ready")
        shown = wait(lambda: generation() == member.generation, GROUP_TIMEOUT_S,
                     f"{group}'s generation ({member.generation}) as kafka_consumergroup_generation on {base}/metrics")
        # Amazon MSK IAM's login module (deploy/Dockerfile's pinned "all" jar) is in the jars directory the job
        # reads, so it was on this job's class path; botocore, which the job's own clients sign with, imports
        # (podman exec fails otherwise).
        pin = re.search(r"^ARG AWS_MSK_IAM_AUTH_VERSION=(\S+)$", DOCKERFILE.read_text(), re.M)
        msk_jar = f"aws-msk-iam-auth-{pin[1] if pin else '?'}-all.jar"
        listed = podman("exec", container.name, "sh", "-c",
                        'ls "$REBALANCE_MONITOR_JARS" && python -c "import botocore"').stdout.split()
        assert msk_jar in listed, f"{msk_jar} not in the container's REBALANCE_MONITOR_JARS: {listed}"
        print(f"{image}: /-/ready 200 after {ready:.1f}s, {group}'s generation on /metrics after {shown:.1f}s")
    finally:
        container.remove()

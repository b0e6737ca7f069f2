"""Least privilege, proven: the job against a broker whose authorizer grants its principal exactly the
ACLs docs/operations.md lists.

The broker runs KRaft's ``StandardAuthorizer`` with a SASL_SSL (SCRAM) listener for the job's principal
and a plaintext one whose principal is the only super user (the test's own admin, clients and ACL
commands). The ACLs are the documented ``kafka-acls`` commands themselves, read from the docs and run
with Kafka's own tool, so the docs cannot drift from what was proven. Without one of them the job
stops before Spark starts, naming the operation and the resource.
"""

from __future__ import annotations

import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from streaming.logs.events import EventLog
from testbed.broker import LocalKafka, acl_command, run_kafka_tool
from testbed.workload import Admin, Member, start_members
from tests.support.exposition import Samples, fetch, series
from tests.support.monitor_helpers import JOB_START_TIMEOUT_S, wait_for_url

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PRINCIPAL_USER = "rebalance-monitor"  # the principal the docs' commands name
PASSWORD = f"scram-{secrets.token_urlsafe(18)}"
FAIL_FAST_BOUND_S = 60


def documented_acl_commands() -> list[list[str]]:
    """The arguments of every ``kafka-acls`` command in docs/operations.md's ACL section, without the
    placeholder connection options (the test supplies its own)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Security and ACLs", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "kafka-acls", line
        words = words[1:]
        for option in ("--bootstrap-server", "--command-config"):
            at = words.index(option)
            del words[at:at + 2]
        commands.append(words)
    return commands


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(tmp_path_factory.mktemp("kafka-acl"), scram_users={PRINCIPAL_USER: PASSWORD},
                        authorizer=True, heap="512m")
    broker.start()
    try:
        commands = documented_acl_commands()
        assert len(commands) >= 4, commands
        for words in commands:
            result = run_kafka_tool(acl_command(broker.version), ["--bootstrap-server", broker.bootstrap, *words],
                                    broker.version)
            assert result.returncode == 0, f"kafka-acls {shlex.join(words)}:\n{result.stdout}\n{result.stderr}"
        yield broker
    finally:
        broker.stop()


def kafka_config(broker: LocalKafka, directory: Path) -> Path:
    path = directory / "kafka.properties"
    options = broker.client_security_options(PRINCIPAL_USER)
    path.write_text("".join(f"{name}={value}\n" for name, value in options.items()))
    return path


def start_job(broker: LocalKafka, workdir: Path, output: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "streaming.job", "--bootstrap-server", broker.secure_bootstrap,
               "--kafka-config", str(kafka_config(broker, workdir)), "--checkpoint-dir", str(workdir / "checkpoint"),
               "--master", "local[2]", "--cluster", "acl", "--trigger-seconds", "1", "--lag-poll-seconds", "1",
               "--metrics-host", "127.0.0.1", "--metrics-port", "0"]
    with output.open("wb") as sink:
        return subprocess.Popen(command, cwd=workdir, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def kip848_supported(broker: LocalKafka) -> bool:
    """confluent-kafka's KIP-848 consumer needs ConsumerGroupHeartbeat v1 (Kafka 4.0+)."""
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        versions = client.api_versions().get(68)
    finally:
        client.close()
    return versions is not None and versions[1] >= 1


def test_documented_acls_are_enough(acl_broker: LocalKafka, tmp_path: Path) -> None:
    """With exactly the documented ACLs the job reads __consumer_offsets, polls log ends and record
    timestamps, reads topic timestamp types, resolves a KIP-848 group's topic ids to names, and serves
    exact lag, with no authorization error in any lookup."""
    admin = Admin(acl_broker.bootstrap)
    members: list[Member] = []
    output = tmp_path / "job-output.log"
    job = None
    kip848 = kip848_supported(acl_broker)
    try:
        admin.create_topic("acl-orders", 2)
        admin.produce("acl-orders", 40)
        admin.commit("acl-committer", {("acl-orders", 0): 3, ("acl-orders", 1): 5})
        wanted = [Member(acl_broker.bootstrap, "acl-classic", ["acl-orders"], "c1")]
        if kip848:
            wanted.append(Member(acl_broker.bootstrap, "acl-848", ["acl-orders"], "k1", protocol="consumer"))
        members.extend(start_members(wanted))
        ends = admin.end_offsets([("acl-orders", 0), ("acl-orders", 1)])
        job = start_job(acl_broker, tmp_path, output)
        url = wait_for_url(job, output)
        if kip848:  # a second member moves a partition: a rebalance event naming topics by id
            members.extend(start_members([Member(acl_broker.bootstrap, "acl-848", ["acl-orders"], "k2",
                                                 protocol="consumer")]))
        events = EventLog(tmp_path / "checkpoint" / "events")
        expected_lag = {str(p): float(ends[("acl-orders", p)] - c) for p, c in ((0, 3), (1, 5))}

        def missing(s: Samples) -> list[str]:
            """What the scrape ``s`` does not show yet, by name."""
            lag = {dict(ls)["partition"]: v for ls, v in
                   series(s, "kafka_consumergroup_partition_lag", group="acl-committer").items()}
            checks = {
                "exact lag (ListOffsets, committed offsets)": lag == expected_lag,
                "the classic group's member": list(series(s, "kafka_consumergroup_current_members",
                                                          group="acl-classic").values()) == [1.0],
                "lag in seconds (record timestamps: Read)": len(series(
                    s, "kafka_consumergroup_partition_lag_seconds", group="acl-committer")) == 2,
                "the timestamp type (DescribeConfigs)": bool(series(s, "kafka_topic_timestamp_type",
                                                                   topic="acl-orders")),
                "the KIP-848 group's rebalance moving a partition": not kip848 or any(
                    event.moved_partitions for event in events.read("acl-848")),
            }
            return [name for name, ok in checks.items() if not ok]

        deadline = time.monotonic() + JOB_START_TIMEOUT_S
        samples: Samples = {}
        while time.monotonic() < deadline and job.poll() is None and missing(samples := fetch(url)):
            time.sleep(1)
        if missing(samples):
            shown = {k: v for k, v in samples.items() if "acl-" in str(k) or "poll_errors" in k[0]}
            head = [line for line in output.read_text(errors="replace").splitlines() if " batch " not in line]
            pytest.fail(f"under the documented ACLs, missing {missing(samples)} (exit {job.poll()});\n"
                        f"series: {shown}\njob output without batch lines:\n" + "\n".join(head[-60:]))
        errors = {dict(ls).get("reason"): v for ls, v in
                  series(samples, "rebalance_monitor_log_end_poll_errors_total").items() if v > 0}
        print(f"log-end poll errors by reason: {errors or 'none'}")
        assert "auth" not in errors, errors  # an authorization error of any lookup is counted as "auth"
        assert list(series(samples, "kafka_topic_partition_log_end_offset", topic="acl-orders",
                           partition="0").values()) == [float(ends[("acl-orders", 0)])]
        if kip848:  # KIP-848 assignments name topics by id: resolved through metadata the ACLs allow
            moved = {topic for event in events.read("acl-848") for topic, _ in event.moved_partitions}
            assert moved == {"acl-orders"}, moved
    finally:
        for member in members:
            member.leave()
        admin.close()
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(90)
    assert job.returncode == 0, output.read_text(errors="replace")[-3000:]
    assert "authorization" not in output.read_text(errors="replace").lower()


def acls(resource: ResourceType, names: tuple[str, ...], *operations: ACLOperation) -> list[ACL]:
    return [ACL(f"User:{PRINCIPAL_USER}", "*", operation, ACLPermissionType.ALLOW,
                ResourcePattern(resource, name, ACLResourcePatternType.LITERAL))
            for name in names for operation in operations]


# The docs grant topic operations twice: on __consumer_offsets and on '*', which covers it too (and
# matters once an operator narrows '*' to the groups' topics): an operation is gone when both are.
TOPICS = ("__consumer_offsets", "*")


@pytest.mark.parametrize(("removed", "named"), [
    (acls(ResourceType.TOPIC, TOPICS, ACLOperation.READ),
     "may not read topic '__consumer_offsets' (ACL operation Read"),
    (acls(ResourceType.TOPIC, TOPICS, ACLOperation.READ, ACLOperation.DESCRIBE),
     "may not describe topic '__consumer_offsets' (ACL operation Describe)"),
], ids=["Read", "Read+Describe"])
def test_missing_acl_fails_fast_naming_it(acl_broker: LocalKafka, tmp_path: Path, removed: list[ACL],
                                          named: str) -> None:
    """A documented ACL removed: the job exits before Spark starts, naming the operation and the topic."""
    client = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap)
    job = None
    try:
        admin = Admin(acl_broker.bootstrap)
        try:
            admin.create_topic("acl-warmup", 1)
            admin.commit("acl-warmup-group", {("acl-warmup", 0): 0})  # the offsets topic exists
        finally:
            admin.close()
        filters = [ACLFilter(a.principal, a.host, a.operation, a.permission_type, a.resource_pattern)
                   for a in removed]
        assert [len(deleted) for _, deleted, _ in client.delete_acls(filters)] == [1] * len(removed)
        time.sleep(1)  # the authorizer applies the deletion from the metadata log
        output = tmp_path / "job-output.log"
        started = time.monotonic()
        job = start_job(acl_broker, tmp_path, output)
        try:
            job.wait(FAIL_FAST_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {FAIL_FAST_BOUND_S}s:\n{output.read_text(errors='replace')[-3000:]}")
        seconds = time.monotonic() - started
        message = output.read_text(errors="replace")
        print(f"without {[(a.operation.name, a.resource_pattern.resource_name) for a in removed]}: "
              f"exit {job.returncode} after {seconds:.1f}s")
        assert job.returncode != 0
        last = message.strip().splitlines()[-1]
        assert last.startswith("rebalance-monitor: Kafka at ") and named in last, last
        assert PASSWORD not in message
        assert not (tmp_path / "checkpoint").exists()  # refused before anything was set up
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait(30)
        client.create_acls(removed)
        client.close()

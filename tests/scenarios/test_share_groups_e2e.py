"""Share groups (KIP-932) on a real 4.x broker: Kafka's own console share consumer, the real job.

Before this, the job folded no share-group record: a share group showed, if at all, as an empty
classic group. Here Kafka's ``ConsoleShareConsumer`` (kafka-tools) joins a share group; the job
must show it with ``group_type="share"``, its member, its group epoch and Kafka's state name,
and ``Empty`` once the consumer is gone.
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.broker import java_command, run_kafka_tool
from testbed.workload import wait_until
from tests.support.exposition import value
from tests.support.monitor_helpers import wait_for

pytestmark = pytest.mark.slow


def _enable_share_groups(kafka_broker) -> None:
    """Share groups need the share.version feature (kafka-features upgrade), off on a new 4.x cluster."""
    result = run_kafka_tool("org.apache.kafka.tools.FeatureCommand",
                            ["--bootstrap-server", kafka_broker.bootstrap, "upgrade", "--feature", "share.version=1"],
                            version=kafka_broker.version)
    assert result.returncode == 0 or "already" in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_share_group_shows_as_a_share_group(kafka_broker, admin, monitor, unique) -> None:
    if kafka_broker.version.split(".")[0] == "3":
        pytest.skip("Kafka 3.9 has no share groups for clients")
    _enable_share_groups(kafka_broker)
    group, topic = f"share-{unique}", f"share-{unique}-t"
    admin.create_topic(topic, 2)
    admin.produce(topic, 20)
    command = java_command(kafka_broker.version, "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                           ["--bootstrap-server", kafka_broker.bootstrap, "--topic", topic, "--group", group],
                           tools=True)
    consumer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 1
                           and value(s, "kafka_consumergroup_info", group=group, group_type="share") == 1,
                           "the share group and its member", timeout=120)
        assert value(samples, "kafka_consumergroup_state", group=group, state="Stable") == 1
        assert value(samples, "kafka_consumergroup_info", group=group, group_type="classic") is None
        assert (value(samples, "kafka_consumergroup_generation", group=group) or 0) >= 1
        assert value(samples, "kafka_consumergroup_rebalances_total", group=group) == 0
    finally:
        consumer.terminate()  # the console consumer closes its share consumer on SIGTERM: it leaves
        consumer.wait(30)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 0,
                       "the member to leave", timeout=90)
    assert value(samples, "kafka_consumergroup_state", group=group, state="Empty") == 1
    assert value(samples, "kafka_consumergroup_info", group=group, group_type="share") == 1
    wait_until(lambda: consumer.poll() is not None, 5, "the console share consumer to exit")

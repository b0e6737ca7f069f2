"""Streams groups (KIP-1071) on a real 4.x broker: a real Kafka Streams application, the real job.

A Kafka Streams application with ``group.protocol=streams`` has the broker keep a streams group,
whose records (types 17–23) a monitor that knew only classic and KIP-848 groups showed as an empty
classic group. Here tests/jvm/StreamsApp.java (Kafka Streams, a stateless copy of one topic into
another) joins; the job must show the group with ``group_type="streams"``, its group epoch, its
member holding one active task per input partition and Kafka's state name, and ``Empty`` once the
application has closed and left. Kafka 4.3.1 needs no switch for this: its rebalance protocols
default to classic, consumer and streams, and a new cluster's ``streams.version`` is 1.

The job runs with the live poll off, so every state shown is the one derived from the offsets topic:
the derivation an operator gets whenever the poll is stale or failing. Started before its source topic
exists, the app joins a group Kafka cannot make ready (``NotReady``: no task assigned) until it gives up;
the same application started again once the topic exists gets its tasks and settles ``Stable``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.exposition import series, value
from tests.support.monitor_helpers import start_monitor, wait_for
from tests.support.streams_app import close_app, streams_app, wait_running

pytestmark = pytest.mark.slow

PARTITIONS = 2


def test_a_streams_group_shows_as_a_streams_group(spark: Any, kafka_broker, admin, unique, tmp_path) -> None:
    if kafka_broker.version.split(".")[0] == "3":
        pytest.skip("Kafka 3.9 has no streams groups")
    group, source, sink = f"streams-{unique}", f"streams-{unique}-in", f"streams-{unique}-out"
    monitor = start_monitor(spark, kafka_broker.bootstrap, tmp_path / "job", "--include-groups",
                            f"^{re.escape(group)}$", "--live-poll-seconds", "0")
    try:
        admin.create_topic(sink, 1)
        args = [kafka_broker.bootstrap, group, source, sink, str(tmp_path / "state")]
        early = streams_app(kafka_broker.version, args, tmp_path / "early-app.log")
        try:
            samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_state", group=group,
                                                        state="NotReady") == 1,
                               "the streams group, NotReady while its source topic is missing", timeout=60)
            assert value(samples, "kafka_consumergroup_info", group=group, group_type="streams") == 1
            assert value(samples, "kafka_consumergroup_current_members", group=group) == 1
            assert set(series(samples, "kafka_consumergroup_member_assigned_partitions", group=group).values()) \
                == {0}
        finally:
            close_app(early)  # Kafka Streams gives up on a missing source topic after a while; its exit is its own
        wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 0,
                 "the early member to leave", timeout=60)

        admin.create_topic(source, PARTITIONS)
        admin.produce(source, 20)
        output = tmp_path / "streams-app.log"
        app = streams_app(kafka_broker.version, args, output)
        try:
            wait_running(app, output)
            samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_state", group=group,
                                                        state="Stable") == 1,
                               "the streams group, Stable", timeout=60)
            assert value(samples, "kafka_consumergroup_info", group=group, group_type="streams") == 1
            assert value(samples, "kafka_consumergroup_info", group=group, group_type="classic") is None
            assert value(samples, "kafka_consumergroup_current_members", group=group) == 1
            assert (value(samples, "kafka_consumergroup_generation", group=group) or 0) >= 1
            held = series(samples, "kafka_consumergroup_member_assigned_partitions", group=group)
            assert len(held) == 1, held
            [(labels, tasks)] = held.items()
            assert dict(labels)["client_id"].startswith(group), labels  # Kafka Streams derives it from client.id
            assert tasks == PARTITIONS  # one active task per partition of the one subtopology
            assert value(samples, "kafka_consumergroup_rebalances_total", group=group) == 0
        finally:
            returncode = close_app(app)  # StreamsApp then closes Kafka Streams, leaving the group
        assert returncode == 0, output.read_text()
        samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 0,
                           "the member to leave", timeout=60)
        assert value(samples, "kafka_consumergroup_state", group=group, state="Empty") == 1, \
            series(samples, "kafka_consumergroup_state", group=group)
        assert value(samples, "kafka_consumergroup_info", group=group, group_type="streams") == 1
        assert value(samples, "kafka_consumergroup_info", group=group, group_type="classic") is None
    finally:
        monitor.stop()

"""The Kafka source's options and the group filter, as Spark's own rlike applies it."""

from __future__ import annotations

import json

import pytest

from streaming.cluster.config import KafkaConfig
from streaming.decode.config import SourceConfig
from streaming.decode.source import FETCH_OPTIONS, excluded_groups, source_options
from streaming.decode.tasks import PIECE_RECORDS


def test_source_options_read_committed_and_the_command_line_wins() -> None:
    kafka = KafkaConfig("b:9092", {"kafka.security.protocol": "SSL", "kafka.fetch.max.wait.ms": "50"})
    options = source_options(kafka, SourceConfig(topic="replay", starting_offsets="latest", max_offsets_per_trigger=7),
                             None)
    assert options["kafka.bootstrap.servers"] == "b:9092" and options["subscribe"] == "replay"
    assert "assign" not in options
    assert options["startingOffsets"] == "latest" and options["maxOffsetsPerTrigger"] == "7"
    assert options["kafka.isolation.level"] == "read_committed" and options["failOnDataLoss"] == "false"
    assert options["groupIdPrefix"] == "rebalance-monitor"
    assert options["maxRecordsPerPartition"] == str(PIECE_RECORDS)
    assert options["kafka.security.protocol"] == "SSL"
    assert options["kafka.fetch.max.wait.ms"] == "50" != FETCH_OPTIONS["kafka.fetch.max.wait.ms"]
    assert "maxOffsetsPerTrigger" not in source_options(kafka, SourceConfig(), None)


def test_a_topic_whose_partitions_are_known_is_assigned_not_subscribed() -> None:
    """Spark's source parses ``assign`` as JSON, topic -> partition numbers; every partition is named."""
    options = source_options(KafkaConfig("b:9092"), SourceConfig(), 3)
    assert json.loads(options["assign"]) == {"__consumer_offsets": [0, 1, 2]}
    assert "subscribe" not in options


@pytest.mark.slow
def test_group_filter_is_javas_regex_with_the_jobs_own_group_left_out(spark) -> None:
    groups = {"orders", "orders-v2", "payments", "rebalance-monitor-1f3a-executor", "\u00e9t\u00e9"}
    assert excluded_groups(spark, groups, SourceConfig()) == {"rebalance-monitor-1f3a-executor"}
    # Java's \p{Alpha} is ASCII letters only (Python's re has no \p at all), and rlike finds, not matches
    assert excluded_groups(spark, groups, SourceConfig(include_groups=r"^\p{Alpha}+$")) == (
        groups - {"orders", "payments"})
    assert excluded_groups(spark, groups, SourceConfig(exclude_groups="^orders")) == {"orders", "orders-v2"}
    assert excluded_groups(spark, set(), SourceConfig()) == set()

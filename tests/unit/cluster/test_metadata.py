"""Topic ids to names from cluster metadata, compared with Kafka's own kafka-topics tool."""

from __future__ import annotations

import pytest

from streaming.cluster.metadata import TopicMetadata, TopicNames
from streaming.protocol import RebalanceEvent
from testbed.broker import run_kafka_tool

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"


def kafka_topic_id(bootstrap: str, topic: str) -> str:
    """The topic id ``kafka-topics --describe`` prints."""
    result = run_kafka_tool(TOPIC_COMMAND, ["--bootstrap-server", bootstrap, "--describe", "--topic", topic])
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("Topic:"))
    return header.split("TopicId:")[1].split()[0]


def event(*moved: tuple[str, int]) -> RebalanceEvent:
    return RebalanceEvent("g", "consumer", 1, 2, 0, None, None, False, (), (), 1, len(moved), moved, 0, 0,
                          None, None)


@pytest.mark.broker
def test_topic_ids_match_kafkas_tool(kafka_broker, admin, unique) -> None:
    topic = f"meta-{unique}"
    admin.create_topic(topic, 2)
    metadata = TopicMetadata(kafka_broker.bootstrap)
    try:
        names = metadata.topic_names([topic])
        everything = metadata.topic_names()
    finally:
        metadata.stop()
    topic_id = kafka_topic_id(kafka_broker.bootstrap, topic)
    assert names == {topic_id: topic} and everything[topic_id] == topic


def test_event_partitions_are_renamed_once_the_id_is_known() -> None:
    calls: list[int] = []

    def lookup() -> dict[str, str]:
        calls.append(1)
        return {"q7YFPGt9Q3-7VA4kbn4Fuw": "orders"}

    names = TopicNames(lookup)
    [resolved] = names.resolve([event(("q7YFPGt9Q3-7VA4kbn4Fuw", 1), ("payments", 0))])
    assert resolved.moved_partitions == (("orders", 1), ("payments", 0))
    names.resolve([event(("q7YFPGt9Q3-7VA4kbn4Fuw", 2))])
    assert len(calls) == 1  # known ids cost no request


def test_a_failed_lookup_keeps_the_ids_and_the_batch() -> None:
    def lookup() -> dict[str, str]:
        raise ConnectionError("broker gone")

    [kept] = TopicNames(lookup).resolve([event(("q7YFPGt9Q3-7VA4kbn4Fuw", 1))])
    assert kept.moved_partitions == (("q7YFPGt9Q3-7VA4kbn4Fuw", 1),)

"""delete.retention.ms read from the cluster: the topic's effective value, the broker's default, or why neither."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.admin import NewTopic

from streaming.cluster.client import DeleteRetention, delete_retention, describe_delete_retention
from testbed.broker import free_port


@pytest.mark.broker
def test_the_topic_value_its_broker_default_and_a_topic_that_does_not_exist(kafka_broker, admin, unique):
    tuned, plain = f"retention-{unique}", f"retention-plain-{unique}"
    admin.client.create_topics([NewTopic(tuned, 1, 1, topic_configs={"cleanup.policy": "compact",
                                                                     "delete.retention.ms": "4321"}),
                                NewTopic(plain, 1, 1)])
    assert describe_delete_retention(kafka_broker.bootstrap, {}, tuned) == DeleteRetention(4321, f"topic {tuned}")
    # No topic override: DescribeConfigs on the topic gives the effective value, the broker's default.
    assert describe_delete_retention(kafka_broker.bootstrap, {}, plain) == DeleteRetention(86_400_000,
                                                                                          f"topic {plain}")
    missing = describe_delete_retention(kafka_broker.bootstrap, {}, f"no-such-topic-{unique}")
    assert missing.ms is None and "gave no delete.retention.ms" in missing.source


def test_no_broker_answering_is_a_reason_not_an_error():
    found = describe_delete_retention(f"127.0.0.1:{free_port()}", {}, "__consumer_offsets", timeout_s=1)
    assert found.ms is None and "no broker answered" in found.source


class RefusingTopicConfigs:
    """An admin client whose principal may describe the topic but not its configs: kafka-python then
    answers the topic without configs (it drops the resource's TOPIC_AUTHORIZATION_FAILED code).
    Faked: the test broker runs without an authorizer."""

    def __init__(self, broker_answer: Any) -> None:
        self.broker_answer = broker_answer
        self.asked: list[tuple[str, str]] = []

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [{"topic": topics[0], "partitions": [{"partition": 0, "leader": 3}, {"partition": 1, "leader": 2}]}]

    def describe_configs(self, resources: list[Any], config_filter: str = "modified") -> dict[str, Any]:
        resource = resources[0]
        kind = resource.resource_type.name.lower()
        self.asked.append((kind, resource.name))
        if kind == "topic":
            return {"topic": {resource.name: {}}}
        if isinstance(self.broker_answer, Exception):
            raise self.broker_answer
        return {"broker": {resource.name: self.broker_answer}}


def test_refused_on_the_topic_falls_back_to_the_default_of_a_broker_leading_it():
    admin = RefusingTopicConfigs({"log.cleaner.delete.retention.ms": {"value": "600000"}})
    assert delete_retention(admin, "__consumer_offsets") == DeleteRetention(600_000, "broker 2")
    assert admin.asked == [("topic", "__consumer_offsets"), ("broker", "2")]


def test_refused_on_both_says_why():
    from kafka.errors import ClusterAuthorizationFailedError

    found = delete_retention(RefusingTopicConfigs(ClusterAuthorizationFailedError("denied")), "__consumer_offsets")
    assert found.ms is None
    assert "DescribeConfigs on topic __consumer_offsets gave no delete.retention.ms" in found.source
    assert "DescribeConfigs on broker 2 failed: ClusterAuthorizationFailedError" in found.source

"""KIP-848 groups' session timeout and heartbeat interval: the group's config, else the brokers', cached.

The admin client is replaced by a fake that answers DescribeConfigs as kafka-python hands Kafka's
answer over (a refused resource comes back without configs); the real broker's answer is the
lead's check (``kafka-configs --entity-type groups``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kafka.admin import ConfigResourceType

from streaming.cluster.metadata import (
    GROUP_CONFIGS_PER_REQUEST,
    GROUP_HEARTBEAT_INTERVAL_CONFIG,
    GROUP_SESSION_TIMEOUT_CONFIG,
    HEARTBEAT_INTERVAL_CONFIG,
    SESSION_TIMEOUT_CONFIG,
    TopicMetadata,
    TopicNames,
)
from streaming.protocol import GroupTimeouts


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Admin:
    """DescribeTopics for the offsets topic (broker 1 leads) and DescribeConfigs on groups and brokers."""

    def __init__(self, groups: dict[str, tuple[int, int]], brokers: tuple[int, int] | None = (45_000, 5_000)):
        self.groups = groups  # groups DescribeConfigs answers for; the others are refused
        self.brokers = brokers
        self.requests: list[list[Any]] = []

    def describe_topics(self, topics: list[str]) -> list[dict]:
        return [{"name": topics[0], "partitions": [{"partition": 0, "leader_id": 1}]}]

    def describe_configs(self, resources: list[Any], config_filter: str = "modified") -> dict:
        self.requests.append(resources)
        answer: dict[str, dict[str, dict]] = {}
        for resource in resources:
            if resource.resource_type == ConfigResourceType.GROUP:
                assert resource.resource_type.value == 32  # Kafka's ConfigResource.Type.GROUP
                found = self.groups.get(resource.name)
                values = {} if found is None else {GROUP_SESSION_TIMEOUT_CONFIG: found[0],
                                                    GROUP_HEARTBEAT_INTERVAL_CONFIG: found[1]}
                answer.setdefault("group", {})[resource.name] = {k: {"name": k, "value": str(v)}
                                                                 for k, v in values.items()}
            else:
                assert resource.resource_type == ConfigResourceType.BROKER and resource.name == "1"
                if self.brokers is None:
                    raise PermissionError("cluster authorization failed")
                values = {SESSION_TIMEOUT_CONFIG: self.brokers[0], HEARTBEAT_INTERVAL_CONFIG: self.brokers[1]}
                answer.setdefault("broker", {})["1"] = {k: {"name": k, "value": str(v)} for k, v in values.items()}
        return answer

    def close(self) -> None:
        pass


def metadata(admin: Admin) -> TopicMetadata:
    return TopicMetadata("unused:9092", admin_factory=lambda **_: admin)


def test_a_groups_own_config_else_the_brokers():
    admin = Admin({"short": (10_000, 1_000)})
    timeouts = metadata(admin).consumer_group_timeouts(["short", "plain"])
    assert timeouts == {"short": GroupTimeouts(10_000, 1_000), "plain": GroupTimeouts(45_000, 5_000)}


def test_kafkas_defaults_when_the_brokers_settings_are_refused_too():
    admin = Admin({}, brokers=None)
    assert metadata(admin).consumer_group_timeouts(["g"]) == {"g": GroupTimeouts(45_000, 5_000)}


def test_many_groups_go_in_few_requests():
    groups = [f"g{i:05}" for i in range(GROUP_CONFIGS_PER_REQUEST * 2 + 1)]
    admin = Admin(dict.fromkeys(groups, (20_000, 2_000)))
    assert len(metadata(admin).consumer_group_timeouts(groups)) == len(groups)
    assert [len(r) for r in admin.requests] == [GROUP_CONFIGS_PER_REQUEST, GROUP_CONFIGS_PER_REQUEST, 1]


class Reads:
    def __init__(self, answer: dict[str, GroupTimeouts] | None = None) -> None:
        self.asked: list[list[str]] = []
        self.answer = answer or {}
        self.fail = False

    def __call__(self, groups: Collection[str]) -> dict[str, GroupTimeouts]:
        self.asked.append(sorted(groups))
        if self.fail:
            raise ConnectionError("broker gone")
        return {g: self.answer.get(g, GroupTimeouts(45_000, 5_000)) for g in groups}


def test_each_group_is_read_once_per_refresh_interval_and_only_groups_due_are_asked():
    clock, reads = Clock(), Reads({"a": GroupTimeouts(10_000, 1_000)})
    names = TopicNames(dict, lambda: 45_000, clock=clock, group_timeouts=reads, group_max_age_s=300)
    assert names.consumer_group_timeouts(["a", "b"]) == {"a": GroupTimeouts(10_000, 1_000),
                                                         "b": GroupTimeouts(45_000, 5_000)}
    clock.now += 100
    assert names.consumer_group_timeouts(["a", "c"])["a"] == GroupTimeouts(10_000, 1_000)
    assert reads.asked == [["a", "b"], ["c"]]
    reads.answer["a"] = GroupTimeouts(12_000, 2_000)  # kafka-configs --alter --entity-type groups
    clock.now += 200
    assert names.consumer_group_timeouts(["a", "b", "c"])["a"] == GroupTimeouts(12_000, 2_000)
    assert reads.asked[-1] == ["a", "b"]  # c was read 200 s ago


def test_a_failed_read_keeps_what_was_known_falls_back_to_the_brokers_and_retries_soon():
    clock, reads = Clock(), Reads({"a": GroupTimeouts(10_000, 1_000)})
    names = TopicNames(dict, lambda: 30_000, refresh_s=5, clock=clock, group_timeouts=reads, group_max_age_s=300)
    names.consumer_group_timeouts(["a"])
    clock.now += 300
    reads.fail = True
    assert names.consumer_group_timeouts(["a", "new"]) == {"a": GroupTimeouts(10_000, 1_000),
                                                           "new": GroupTimeouts(30_000, 5_000)}
    clock.now += 1
    names.consumer_group_timeouts(["a", "new"])
    assert len(reads.asked) == 2  # not asked again within refresh_s
    reads.fail = False
    clock.now += 5
    assert names.consumer_group_timeouts(["new"]) == {"new": GroupTimeouts(45_000, 5_000)}
    assert len(reads.asked) == 3


def test_without_group_configs_every_group_gets_the_brokers_session_timeout():
    names = TopicNames(dict, lambda: 10_000)
    assert names.consumer_group_timeouts(["a", "b"]) == dict.fromkeys(("a", "b"), GroupTimeouts(10_000, 5_000))
    assert TopicNames(dict).consumer_group_timeouts(["a"]) == {"a": GroupTimeouts(45_000, 5_000)}

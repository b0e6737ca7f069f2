"""Topic ids to names from cluster metadata, compared with Kafka's own kafka-topics tool."""

from __future__ import annotations

import pytest

from streaming.cluster import metadata
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


@pytest.mark.broker
def test_partition_counts_and_a_topic_not_there_yet_is_not_created(kafka_broker, admin, unique) -> None:
    """What the source's ``assign`` is built from; the broker creates topics on request (testbed's
    auto.create.topics.enable), and the lookup must not make the one it was asked about."""
    topic, missing = f"meta-{unique}", f"meta-missing-{unique}"
    admin.create_topic(topic, 3)
    metadata = TopicMetadata(kafka_broker.bootstrap)
    try:
        assert metadata.partition_count(topic) == 3
        assert metadata.partition_count(missing) is None
        assert metadata.partition_count(missing) is None  # still not there after being asked about
    finally:
        metadata.stop()
    result = run_kafka_tool(TOPIC_COMMAND, ["--bootstrap-server", kafka_broker.bootstrap, "--list"])
    assert result.returncode == 0 and topic in result.stdout.split() and missing not in result.stdout.split()


@pytest.mark.broker
def test_topic_ids_by_id_and_a_deleted_topics_id(kafka_broker, admin, unique) -> None:
    """Asking by id (what the cache does): a known id gets its name, a deleted topic's id nothing."""
    topic, deleted = f"meta-{unique}", f"meta-gone-{unique}"
    admin.create_topic(topic, 1)
    admin.create_topic(deleted, 1)
    topic_id, gone_id = kafka_topic_id(kafka_broker.bootstrap, topic), kafka_topic_id(kafka_broker.bootstrap, deleted)
    admin.client.delete_topics([deleted])
    admin.commit(f"meta-{unique}", {(topic, 0): 0})  # the session timeout is read where __consumer_offsets lives
    metadata = TopicMetadata(kafka_broker.bootstrap)
    try:
        assert metadata.names_by_id([topic_id, gone_id]) == {topic_id: topic}
        assert metadata.consumer_session_timeout_ms() == 10000  # testbed/broker.py sets it
    finally:
        metadata.stop()


ORDERS = "q7YFPGt9Q3-7VA4kbn4Fuw"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_event_partitions_are_renamed_once_the_id_is_known() -> None:
    calls: list[list[str]] = []

    def lookup(ids) -> dict[str, str]:
        calls.append(sorted(ids))
        return {ORDERS: "orders"}

    clock = Clock()
    names = TopicNames(lambda ids: {}, clock=clock)
    assert names.topic_names([ORDERS]) == {}  # the group stage asked for the id while folding: not known yet
    names._describe = lookup  # the topic is in the metadata now
    clock.now += 60
    [resolved] = names.resolve([event((ORDERS, 1), ("payments", 0))])
    assert resolved.moved_partitions == (("orders", 1), ("payments", 0))
    names.resolve([event((ORDERS, 2))])
    assert calls == [[ORDERS]]  # known ids cost no request; "payments" is a name, never asked for


def test_a_failed_lookup_keeps_the_ids_and_the_batch_and_is_counted_once() -> None:
    clock = Clock()

    def lookup(ids) -> dict[str, str]:
        raise ConnectionError("broker gone")

    names = TopicNames(lookup, clock=clock)
    [kept] = names.resolve([event((ORDERS, 1))])
    assert kept.moved_partitions == ((ORDERS, 1),)
    clock.now += 60
    assert names.topic_names([ORDERS]) == {}
    assert names.unresolved() == {"metadata_error": 1}


def test_unknown_ids_ask_at_most_once_per_refresh_interval_and_count_once() -> None:
    clock, calls = Clock(), []
    known = {ORDERS: "orders"}

    def lookup(ids) -> dict[str, str]:
        calls.append(sorted(ids))
        return {t: known[t] for t in ids if t in known}

    names = TopicNames(lookup, refresh_s=5, clock=clock)
    gone = "Zb1xWJpGSQaW2q0Uu0q9Pg"
    assert names.topic_names([ORDERS, gone]) == {ORDERS: "orders"}
    clock.now += 1
    assert names.topic_names([gone]) == {}  # within the interval: no request
    clock.now += 5
    assert names.topic_names([gone]) == {}
    assert calls == [[gone, ORDERS], [gone]]
    assert names.unresolved() == {"unknown_topic_id": 1}
    names.learn({gone: "created-meanwhile"})  # a commit carrying the id names it without a request
    assert names.topic_names([gone]) == {gone: "created-meanwhile"} and len(calls) == 2


def test_names_of_topics_long_gone_are_forgotten_oldest_learnt_first(monkeypatch) -> None:
    monkeypatch.setattr(metadata, "NAMES_REMEMBERED", 3)
    calls: list[list[str]] = []

    def lookup(ids) -> dict[str, str]:
        calls.append(sorted(ids))
        return {t: f"named-{t}" for t in ids}

    clock = Clock()
    names = TopicNames(lookup, clock=clock)
    ids = [f"{letter}b1xWJpGSQaW2q0Uu0q9Pg" for letter in "ABCD"]
    names.learn({ids[0]: "a", ids[1]: "b", ids[2]: "c"})
    names.learn({ids[0]: "a"})  # still committed to: learnt again, now the newest
    names.learn({ids[3]: "d"})  # one too many: the oldest learnt (B) goes
    assert names.topic_names([ids[0], ids[2], ids[3]]) == {ids[0]: "a", ids[2]: "c", ids[3]: "d"} and not calls
    assert names.topic_names([ids[1]]) == {ids[1]: f"named-{ids[1]}"}  # asked again when it is needed again
    assert calls == [[ids[1]]] and len(names._names) == 3


def test_session_timeout_is_read_once_and_kept() -> None:
    clock, reads = Clock(), []

    def read() -> int:
        reads.append(1)
        return 10_000

    names = TopicNames(dict, read, clock=clock)
    assert names.consumer_session_timeout_ms() == 10_000
    clock.now += 60
    assert names.consumer_session_timeout_ms() == 10_000 and len(reads) == 1

"""KIP-848 topic ids named through cluster metadata, as Kafka 4.1+ writes its records (no type 4).

Records are encoded as Kafka writes them and go through the real decode stage into the group
stage; the cluster's side (:class:`~streaming.cluster.metadata.TopicNames`) is given a lookup
function in place of a broker (tests/unit/cluster/test_metadata.py asks a real one).
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from streaming.cluster.metadata import TopicNames
from streaming.decode.stage import make_decoder
from streaming.driver.lag_render import ScrapeText
from streaming.driver.publish import build_publishing
from streaming.groups.stage import GroupStage
from streaming.lag.tracker import LagTracker
from streaming.protocol import STAGE_SCHEMA, BatchInput
from tests.support.decoder_encoder import encode_key, encode_value, uuid_bytes
from tests.support.stage_records import Row, kafka_batch

G = "g"
T0 = 1_700_000_000_000
ORDERS, GONE = "q1YFPGt9Q3-7VA4kbn4Fuw", "Zb1xWJpGSQaW2q0Uu0q9Pg"  # GONE: a deleted topic's id
SESSION_MS = 10_000  # the test broker's group.consumer.session.timeout.ms (Kafka's default is 45 s)


def member_metadata(member: str) -> Row:
    value = {"instanceId": None, "rackId": None, "clientId": f"client-{member}", "clientHost": "/10.0.0.2",
             "subscribedTopicNames": ("orders",), "subscribedTopicRegex": None, "rebalanceTimeoutMs": 300000,
             "serverAssignor": "uniform"}
    return encode_key(5, {"groupId": G, "memberId": member}), encode_value(5, 0, value)


def group_epoch(epoch: int) -> Row:
    return encode_key(3, {"groupId": G}), encode_value(3, 0, {"epoch": epoch})


def target_epoch(epoch: int) -> Row:
    return encode_key(6, {"groupId": G}), encode_value(6, 0, {"assignmentEpoch": epoch})


def target(member: str, parts: dict[str, list[int]]) -> Row:
    value = {"topicPartitions": tuple({"topicId": t, "partitions": tuple(p)} for t, p in parts.items())}
    return encode_key(7, {"groupId": G, "memberId": member}), encode_value(7, 0, value)


def current(member: str, epoch: int, parts: dict[str, list[int]]) -> Row:
    value = {"memberEpoch": epoch, "previousMemberEpoch": epoch - 1, "state": 0,
             "assignedPartitions": tuple({"topicId": t, "partitions": tuple(p)} for t, p in parts.items()),
             "partitionsPendingRevocation": ()}
    return encode_key(8, {"groupId": G, "memberId": member}), encode_value(8, 0, value)


def tombstone(record_type: int, member: str) -> Row:
    return encode_key(record_type, {"groupId": G, "memberId": member}), None


def offset_commit(topic: str, partition: int, offset: int, ts: int) -> Row:
    value = {"offset": offset, "leaderEpoch": -1, "metadata": "", "commitTimestamp": ts}
    return encode_key(1, {"group": G, "topic": topic, "partition": partition}), encode_value(1, 3, value)


class Cluster:
    """What the cluster's metadata says: ORDERS exists, GONE was deleted. Counts the lookups."""

    def __init__(self) -> None:
        self.lookups: list[list[str]] = []

    def describe(self, ids: Collection[str]) -> dict[str, str]:
        self.lookups.append(sorted(ids))
        return {t: "orders" for t in ids if t == ORDERS}


class Batches:
    """Feeds the group stage batches of encoded records, each written at its own time."""

    def __init__(self, stage: GroupStage) -> None:
        self.stage = stage
        self.offset = 0

    def apply(self, rows: list[Row], at_ms: int) -> BatchInput:
        batch = kafka_batch(rows, first_offset=self.offset, time_ms=at_ms)
        self.offset += len(rows)
        table = pa.Table.from_batches(list(make_decoder(100)(iter([batch]))), schema=STAGE_SCHEMA)
        decoded = BatchInput.from_arrow(table)
        self.events = self.stage.apply(decoded).events
        return decoded


def two_member_group(stage: GroupStage) -> Batches:
    """Members A and B on orders (A: 0-1, B: 2-3), B also assigned a partition of a deleted topic."""
    a, b = {ORDERS: [0, 1]}, {ORDERS: [2, 3], GONE: [0]}
    batches = Batches(stage)
    batches.apply([member_metadata("A"), member_metadata("B"), group_epoch(1), target("A", a), target("B", b),
                   target_epoch(1), current("A", 1, a), current("B", 1, b)], T0)
    return batches


def test_assignments_name_topics_from_cluster_metadata_and_leave_unknown_ids_out():
    cluster = Cluster()
    names = TopicNames(cluster.describe, lambda: SESSION_MS)
    stage = GroupStage(facts=names)
    two_member_group(stage)
    assert stage.assignments(G) == {"A": [("orders", 0), ("orders", 1)], "B": [("orders", 2), ("orders", 3)]}
    for _ in range(3):
        stage.assignments(G)
    # The deleted topic's id is counted once, however often it is asked for; the cache asks no more
    # than once per refresh interval.
    assert names.unresolved() == {"unknown_topic_id": 1}
    assert len(cluster.lookups) == 1


def test_without_names_nothing_is_handed_over_as_a_topic():
    stage = GroupStage()  # no cluster to ask (what a 4.1+ group looked like before)
    two_member_group(stage)
    assert stage.assignments(G) == {"A": [], "B": []}


def test_lag_poller_is_asked_for_topic_names_only():
    """Member lag and the partitions polled come from the named assignment; an uncommitted one is wanted.
    The deleted topic's id is not polled: it is counted, once, in the poller's health series."""
    names = TopicNames(Cluster().describe, lambda: SESSION_MS)
    stage = GroupStage(facts=names)
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 0, 5, T0 + 100)], T0 + 100)
    tracker = LagTracker()
    text = ScrapeText("c", tracker, names.unresolved)
    publisher = build_publishing("c", tracker, text=text)
    publisher.apply(stage.change(G, T0 + 200))
    publisher.book.refresh()
    assert tracker.partitions() == {("orders", p) for p in range(4)}
    assert b'rebalance_monitor_unresolved_topic_ids_total{cluster="c",reason="unknown_topic_id"} 1\n' in (
        text.text())


def test_departure_of_a_killed_member_is_a_session_timeout_with_the_brokers_timeout():
    """B committed 11 s before its removal: past the broker's 10 s session timeout, far below
    max.poll.interval.ms. Its partitions are found by name among the group's commits."""
    stage = GroupStage(facts=TopicNames(Cluster().describe, lambda: SESSION_MS))
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 2, 40, T0 + 1_000), offset_commit("orders", 0, 40, T0 + 11_500)],
                  T0 + 1_000)
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)], T0 + 12_000)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], T0 + 12_500)
    [event] = batches.events
    assert event.members_left == ("B",) and event.departures == ("session_timeout",)
    assert event.moved_partitions == (("orders", 2), ("orders", 3))
    assert stage.summary(G, T0 + 13_000).departures == {"session_timeout": 1}


def test_departure_without_the_session_timeout_falls_back_to_kafkas_default():
    """The same 11 s gap is a clean leave against Kafka's default 45 s: the broker's setting matters."""
    stage = GroupStage(facts=TopicNames(Cluster().describe))
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 2, 40, T0 + 1_000)], T0 + 1_000)
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)], T0 + 12_000)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], T0 + 12_500)
    assert batches.events[0].departures == ("left_cleanly",)


def test_topic_ids_carried_by_offset_commits_name_topics_without_asking_the_cluster():
    """Kafka 4.1+ writes the topic's id into each offset commit (OffsetCommitValue v4, tag 0): the decode
    stage carries it to the group stage, which learns the name from it before folding the group's records."""
    cluster = Cluster()
    stage = GroupStage(facts=TopicNames(cluster.describe, lambda: SESSION_MS))
    key = encode_key(1, {"group": G, "topic": "orders", "partition": 0})
    value = encode_value(1, 4, {"offset": 3, "leaderEpoch": -1, "metadata": "", "commitTimestamp": T0,
                                "topicId": ORDERS})
    batches = Batches(stage)
    decoded = batches.apply([(key, value)], T0)
    assert decoded.commits.column("topic_id").to_pylist() == [uuid_bytes(ORDERS)]
    batches.apply([member_metadata("A"), group_epoch(1), target("A", {ORDERS: [0, 1]}), target_epoch(1),
                   current("A", 1, {ORDERS: [0, 1]})], T0 + 10)
    assert stage.assignments(G) == {"A": [("orders", 0), ("orders", 1)]}
    assert cluster.lookups == []


def test_state_deltas_written_before_the_topic_id_column_replay():
    stage = GroupStage(facts=TopicNames(Cluster().describe))
    table = pa.Table.from_batches(list(make_decoder(100)(iter([kafka_batch([offset_commit("orders", 0, 7, T0)])]))),
                                  schema=STAGE_SCHEMA)
    old = BatchInput.from_arrow(table).commits.drop_columns(["topic_id"])
    stage.apply(BatchInput(old, STAGE_SCHEMA.empty_table(), STAGE_SCHEMA.empty_table()))
    assert stage.offsets[G].offsets[("orders", 0)].offset == 7

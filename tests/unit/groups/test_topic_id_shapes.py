"""A topic name shaped like a topic id (22 characters of ``[A-Za-z0-9_-]``) is never taken for one
(issue 31, item 6): ids are the strings of the records' Uuid fields, not strings of that shape.
"""

from __future__ import annotations

from collections.abc import Collection

from streaming.cluster.metadata import TOPIC_ID_TEXT, TopicNames
from streaming.groups.model import ConsumerState, GroupSnapshot, referenced_topic_ids
from streaming.groups.stage import GroupStage
from streaming.protocol import CLASSIC, CONSUMER, RebalanceEvent
from tests.unit.groups.test_topic_names import (
    ORDERS,
    SESSION_MS,
    T0,
    Batches,
    current,
    group_epoch,
    member_metadata,
    target,
    target_epoch,
)

NAME = "customer-orders-events"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """ORDERS is the id of the topic named NAME; counts the lookups."""

    def __init__(self) -> None:
        self.lookups: list[list[str]] = []

    def describe(self, ids: Collection[str]) -> dict[str, str]:
        self.lookups.append(sorted(ids))
        return {t: NAME for t in ids if t == ORDERS}


def moved(*partitions: tuple[str, int]) -> RebalanceEvent:
    return RebalanceEvent("g", CONSUMER, 1, 2, T0, "uniform", None, False, ("C",), (), 3, len(partitions),
                          tuple(partitions), 1, 1, 1.0, 1.0)


def test_the_name_has_an_ids_shape():
    assert len(NAME) == 22 and TOPIC_ID_TEXT.match(NAME)


def test_a_rebalance_on_a_topic_named_like_an_id_counts_no_unresolved_id():
    clock, cluster = Clock(), Cluster()
    names = TopicNames(cluster.describe, lambda: SESSION_MS, clock=clock)
    stage = GroupStage(facts=names)
    a, b = {ORDERS: [0, 1]}, {ORDERS: [2, 3]}
    batches = Batches(stage)
    batches.apply([member_metadata("A"), member_metadata("B"), group_epoch(1), target("A", a), target("B", b),
                   target_epoch(1), current("A", 1, a), current("B", 1, b)], T0)
    clock.now += 60
    # C joins and takes partition 1 from A: the event names the moved partition by the topic's name.
    batches.apply([member_metadata("C"), group_epoch(2), target("A", {ORDERS: [0]}), target("C", {ORDERS: [1]}),
                   target_epoch(2)], T0 + 60_000)
    [event] = batches.events
    assert event.moved_partitions == ((NAME, 1),)
    clock.now += 60  # a lookup would be due
    lookups = len(cluster.lookups)
    assert names.resolve(batches.events) == batches.events
    assert len(cluster.lookups) == lookups  # the name was not asked for as an id
    assert names.unresolved() == {}


def test_resolve_looks_up_only_strings_asked_for_as_ids():
    clock, cluster = Clock(), Cluster()
    names = TopicNames(lambda ids: {}, clock=clock)  # the topic is not in the metadata yet
    assert names.topic_names([ORDERS]) == {}  # the group stage asks for a Uuid field's topic
    names._describe = cluster.describe  # created meanwhile
    clock.now += 60
    [event] = names.resolve([moved((ORDERS, 1), (NAME, 0))])
    assert event.moved_partitions == ((NAME, 1), (NAME, 0))
    assert cluster.lookups == [[ORDERS]]  # the id, not the name
    assert names.unresolved() == {"unknown_topic_id": 1}  # ORDERS, from the first lookup: not the name


def test_a_name_never_asked_for_is_left_alone_however_it_looks():
    cluster = Cluster()
    names = TopicNames(cluster.describe)
    [event] = names.resolve([moved((NAME, 0))])
    assert event.moved_partitions == ((NAME, 0),) and cluster.lookups == [] and names.unresolved() == {}


def test_a_group_converted_from_classic_does_not_ask_for_its_classic_topic_names():
    """Until its first KIP-848 boundary, a converted group's boundary is the classic one, by name."""
    snapshot = GroupSnapshot(group="g", consumer=ConsumerState(group_epoch=5), epoch_type=CLASSIC,
                             epoch_owners={(NAME, 0): "A"}, last_owner={(NAME, 0): "A", (NAME, 1): "B"})
    assert referenced_topic_ids(snapshot) == set()
    snapshot.epoch_type = CONSUMER
    snapshot.epoch_owners, snapshot.last_owner = {(ORDERS, 0): "A"}, {(ORDERS, 0): "A"}
    assert referenced_topic_ids(snapshot) == {ORDERS}

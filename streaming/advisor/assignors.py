"""Assignor advisor: what each built-in assignor would do with a classic group's members.

For a classic consumer group's current members, subscriptions and assignment, run
kafka-python's own implementations of Kafka's built-in assignors (range, roundrobin,
sticky, cooperative-sticky) offline, and compare each result with what the group's
assignor produced: the imbalance (:func:`streaming.groups.boundary.imbalance_ratio`) and how many
currently owned partitions would change owner. Sticky assignors are given each
member's current partitions, as their clients would send them; cooperative-sticky is
run for both of its rounds (the first withholds partitions that change owner, the
second assigns them), and its final assignment is reported.

Only classic groups speaking the consumer protocol are advised: KIP-848 groups are
assigned by the broker, and other protocols (connect, streams) carry no subscriptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from streaming.groups.boundary import imbalance_ratio
from streaming.groups.model import Assignment, GroupSnapshot

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


@dataclass(frozen=True)
class AdvisorMember:
    """A member as the assignors see it: id, static instance id, subscription, current partitions."""

    member_id: str
    instance_id: str | None
    topics: tuple[str, ...]
    assigned: Mapping[str, Sequence[int]]


class Outcome(NamedTuple):
    """One assignor's result for the group: its imbalance and the partitions it would move."""

    imbalance_ratio: float | None
    partitions_moved: int


class _Cluster:
    """The two questions kafka-python's assignors ask about the cluster."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = partitions

    def topics(self) -> set[str]:
        return set(self._partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._partitions.get(topic)
        return set(range(count)) if count is not None else None


class _JoinMember(NamedTuple):
    """The shape of a JoinGroup response member, which the assignors read."""

    member_id: str
    group_instance_id: str | None
    metadata: ConsumerProtocolSubscription


def members_of(snapshot: GroupSnapshot) -> list[AdvisorMember]:
    """The group's current members; ValueError when the group is not a classic consumer group."""
    classic = snapshot.classic
    if classic is None or classic.protocol_type != "consumer":
        raise ValueError(f"group {snapshot.group!r} is not a classic consumer group: nothing to advise")
    return [
        AdvisorMember(m.member_id, m.instance_id, tuple(m.subscribed_topics), m.assigned) for m in classic.members
    ]


def partition_counts(members: Sequence[AdvisorMember]) -> dict[str, int]:
    """Partitions per subscribed topic, as far as the current assignment shows them.

    A consumer-protocol assignment covers every partition of the subscribed topics, so
    the highest assigned partition + 1 is the count; topics nobody holds are left out
    (pass real counts to :func:`advise` when the caller knows them).
    """
    subscribed = {t for m in members for t in m.topics}
    counts: dict[str, int] = {}
    for m in members:
        for topic, parts in m.assigned.items():
            if topic in subscribed and parts:
                counts[topic] = max(counts.get(topic, 0), max(parts) + 1)
    return counts


def simulate(
    assignor: str, members: Sequence[AdvisorMember], partitions: Mapping[str, int], generation: int = 1
) -> dict[str, Assignment]:
    """Member id → assignment that ``assignor`` (kafka-python's implementation) produces.

    Members go in static first, then dynamic: kafka-python's range and roundrobin group
    them with ``itertools.groupby``, which drops members when the two kinds interleave.
    """
    cluster = _Cluster(partitions)
    members = sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id))
    if assignor == "range":
        result = RangePartitionAssignor.assign(cluster, _join(members, _plain))
    elif assignor == "roundrobin":
        if len({frozenset(m.topics) for m in members}) > 1:
            return _round_robin(members, partitions)
        result = RoundRobinPartitionAssignor.assign(cluster, _join(members, _plain))
    elif assignor == "sticky":
        result = StickyPartitionAssignor().assign(cluster, _join(members, _sticky(generation)))
    elif assignor == "cooperative-sticky":
        first = _assignments(CooperativeStickyAssignor().assign(cluster, _join(members, _owned(generation))))
        after_first = [
            AdvisorMember(m.member_id, m.instance_id, m.topics, first[m.member_id]) for m in members
        ]
        result = CooperativeStickyAssignor().assign(cluster, _join(after_first, _owned(generation + 1)))
    else:
        raise ValueError(f"unknown assignor {assignor!r} (known: {', '.join(ASSIGNORS)})")
    return _assignments(result)


def _round_robin(members: Sequence[AdvisorMember], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    """Kafka's round-robin walk for members with different subscriptions.

    kafka-python 3.0.12's RoundRobinPartitionAssignor raises KeyError there (it looks a
    member's topics up by an (instance id, member id) pair). Same walk: partitions in
    (topic, partition) order, each to the next member in the cycle that subscribes to
    its topic; members in the order :func:`simulate` sorts them.
    """
    subscribed = {t for m in members for t in m.topics}
    walk = sorted((t, p) for t in subscribed if t in partitions for p in range(partitions[t]))
    out: dict[str, Assignment] = {m.member_id: {} for m in members}
    position = -1
    for topic, p in walk:
        position += 1
        while topic not in members[position % len(members)].topics:
            position += 1
        out[members[position % len(members)].member_id].setdefault(topic, []).append(p)
    return out


def _join(
    members: Sequence[AdvisorMember], subscription: Callable[[AdvisorMember], ConsumerProtocolSubscription]
) -> list[_JoinMember]:
    return [_JoinMember(m.member_id, m.instance_id, subscription(m)) for m in members]


def _plain(member: AdvisorMember) -> ConsumerProtocolSubscription:
    return ConsumerProtocolSubscription(version=0, topics=list(member.topics), user_data=b"")


def _sticky(generation: int) -> Callable[[AdvisorMember], ConsumerProtocolSubscription]:
    def subscription(member: AdvisorMember) -> ConsumerProtocolSubscription:
        previous = [(topic, list(parts)) for topic, parts in sorted(member.assigned.items())]
        user_data = StickyAssignorUserData(previous_assignment=previous, generation=generation)
        return ConsumerProtocolSubscription(version=0, topics=list(member.topics), user_data=user_data)

    return subscription


def _owned(generation: int) -> Callable[[AdvisorMember], ConsumerProtocolSubscription]:
    def subscription(member: AdvisorMember) -> ConsumerProtocolSubscription:
        owned = [
            ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=list(parts))
            for topic, parts in sorted(member.assigned.items())
        ]
        return ConsumerProtocolSubscription(
            version=2, topics=sorted(member.topics), user_data=b"", owned_partitions=owned, generation_id=generation
        )

    return subscription


def _assignments(result: Mapping[str, Any]) -> dict[str, Assignment]:
    return {
        member_id: {topic: sorted(parts) for topic, parts in assignment.assigned_partitions if parts}
        for member_id, assignment in result.items()
    }


def outcome(current: Mapping[str, Mapping[str, Sequence[int]]], proposed: Mapping[str, Assignment]) -> Outcome:
    """Imbalance of ``proposed`` and how many partitions owned now it gives to another member."""
    owner_now = {(t, p): m for m, assignment in current.items() for t, parts in assignment.items() for p in parts}
    moved = sum(
        1
        for m, assignment in proposed.items()
        for t, parts in assignment.items()
        for p in parts
        if owner_now.get((t, p), m) != m
    )
    counts = [sum(len(parts) for parts in assignment.values()) for assignment in proposed.values()]
    return Outcome(imbalance_ratio(counts), moved)


def advise(snapshot: GroupSnapshot, partitions: Mapping[str, int] | None = None) -> dict[str, Outcome]:
    """``{assignor: Outcome}`` for every built-in assignor, for the group's current members.

    ``partitions`` (topic → partition count) overrides what :func:`partition_counts`
    reads from the current assignment (new partitions nobody holds yet, for example).
    """
    generation = snapshot.classic.generation if snapshot.classic is not None else 1
    return advise_members(members_of(snapshot), generation, partitions)


def advise_members(
    members: Sequence[AdvisorMember], generation: int, partitions: Mapping[str, int] | None = None
) -> dict[str, Outcome]:
    """:func:`advise` for members already extracted (what the background pass holds)."""
    counts = {**partition_counts(members), **(partitions or {})}
    current = {m.member_id: m.assigned for m in members}
    return {name: outcome(current, simulate(name, members, counts, generation)) for name in ASSIGNORS}

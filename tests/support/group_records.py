"""Kafka's group records as the coordinators write them, built for the group-state tests.

Record sequences follow Kafka's coordinators (3.9 Scala ``GroupCoordinator``, 4.x
``GroupMetadataManager``): classic groups get one type 2 value per completed
generation (4.x adds a generation-0 ``protocolType ""`` value at creation, and both
write an Empty value with generation + 1 when the last member leaves); a KIP-848 member
leaving is tombstones 8, 7, 5 and a group-epoch bump, with the next target assignment
computed only when a remaining member heartbeats. ``fold`` applies records to a snapshot;
the hypothesis strategies draw any sequence of them.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

from decoders.records import Record, Struct
from streaming.groups.fold import apply_record
from streaming.groups.model import GroupSnapshot
from streaming.protocol import (
    RebalanceEvent,
)

G = "g"


T0 = 1_700_000_000_000


def parts(spec: str) -> dict[str, list[int]]:
    """``"t0p0 t0p1 t1p0"`` → ``{"t0": [0, 1], "t1": [0]}`` (the seeds' notation)."""
    out: dict[str, list[int]] = {}
    for topic, p in re.findall(r"(t\d+)p(\d+)", spec):
        out.setdefault(topic, []).append(int(p))
    return out


SEED_TOPICS = ("t0", "t1", "t2", "t3")


def member(member_id: str, spec: str, instance: str | None = None, topics: tuple[str, ...] = SEED_TOPICS,
           client: str | None = None) -> Struct:
    """A classic member owning ``spec`` and subscribed to ``topics``."""
    assigned = parts(spec)
    return Struct(
        memberId=member_id,
        groupInstanceId=instance,
        clientId=client or f"client-{member_id}",
        clientHost="/10.0.0.1",
        rebalanceTimeout=300000,
        sessionTimeout=45000,
        subscription=b"",
        assignment=b"",
        decodedSubscription=Struct(
            version=3, topics=topics, userData=None,
            ownedPartitions=(),
            generationId=-1, rackId=None,
        ),
        decodedAssignment=Struct(
            version=3,
            assignedPartitions=tuple(Struct(topic=t, partitions=tuple(p)) for t, p in assigned.items()),
            userData=None,
        ),
        payloadError=None,
    )


def classic(generation: int, members: list[Struct], protocol: str | None = "range",
            leader: str | None = None, ts: int = -1, group: str = G) -> Record:
    if leader is None and members:
        leader = members[0]["memberId"]
    value = Struct(
        protocolType="consumer", generation=generation, protocol=protocol if members else None,
        leader=leader, currentStateTimestamp=ts, members=tuple(members),
    )
    return Record(2, Struct(group=group), 3, value)


def classic_tombstone(group: str = G) -> Record:
    return Record(2, Struct(group=group), None, None)


def created_4x(ts: int = T0) -> Record:
    """What the 4.x coordinator writes when a classic group is created (newEmptyGroupMetadataRecord)."""
    value = Struct(protocolType="", generation=0, protocol=None, leader=None, currentStateTimestamp=ts,
                   members=())
    return Record(2, Struct(group=G), 3, value)


def fold(snapshot: GroupSnapshot | None, *records: Record, t: int = T0, commits=None):
    events: list[RebalanceEvent] = []
    for record in records:
        snapshot, new = apply_record(snapshot, record, t, commits)
        events.extend(new)
    return snapshot, events


def owned(summary) -> dict[str, int]:
    return {m.member: m.assigned_partitions for m in summary.members}


RANGE_2 = [member("C0", "t0p0 t0p1 t1p0 t1p1"), member("C1", "t0p2 t1p2")]


STICKY_3 = [
    member("C0", "t0p0 t1p1 t3p0"),
    member("C1", "t0p1 t2p0 t3p1"),
    member("C2", "t1p0 t2p1"),
]


TA, TB = "q1YFPGt9Q3-7VA4kbn4Fuw", "Zb1xWJpGSQaW2q0Uu0q9Pg"


def tps(spec: dict[str, list[int]]) -> tuple[Struct, ...]:
    return tuple(Struct(topicId=t, partitions=tuple(p)) for t, p in spec.items())


def k3(epoch: int) -> Record:
    return Record(3, Struct(groupId=G), 0, Struct(epoch=epoch))


def k4() -> Record:
    topics = (Struct(topicId=TA, topicName="orders", numPartitions=4, partitionMetadata=()),
              Struct(topicId=TB, topicName="payments", numPartitions=2, partitionMetadata=()))
    return Record(4, Struct(groupId=G), 0, Struct(topics=topics))


def k5(member_id: str, instance: str | None = None, assignor: str | None = "uniform",
       topics: tuple[str, ...] = ("orders", "payments")) -> Record:
    value = Struct(instanceId=instance, rackId=None, clientId=f"client-{member_id}", clientHost="/10.0.0.2",
                   subscribedTopicNames=topics, subscribedTopicRegex=None,
                   rebalanceTimeoutMs=300000, serverAssignor=assignor, classicMemberMetadata=None)
    return Record(5, Struct(groupId=G, memberId=member_id), 0, value)


def k6(epoch: int) -> Record:
    return Record(6, Struct(groupId=G), 0, Struct(assignmentEpoch=epoch))


def k7(member_id: str, spec: dict[str, list[int]]) -> Record:
    return Record(7, Struct(groupId=G, memberId=member_id), 0, Struct(topicPartitions=tps(spec)))


def k8(member_id: str, epoch: int, spec: dict[str, list[int]], state: int = 0,
       pending: dict[str, list[int]] | None = None) -> Record:
    value = Struct(memberEpoch=epoch, previousMemberEpoch=epoch - 1, state=state,
                   assignedPartitions=tps(spec), partitionsPendingRevocation=tps(pending or {}))
    return Record(8, Struct(groupId=G, memberId=member_id), 0, value)


def tomb(record_type: int, member_id: str | None = None) -> Record:
    key = Struct(groupId=G) if member_id is None else Struct(groupId=G, memberId=member_id)
    return Record(record_type, key, None, None)


ALL_A = {TA: [0, 1, 2, 3], TB: [0, 1]}


def one_member_group() -> GroupSnapshot:
    snap, events = fold(None, k5("A"), k3(1), k4(), k7("A", ALL_A), k6(1), k8("A", 1, ALL_A))
    assert events == []
    return snap


def two_member_group() -> GroupSnapshot:
    snap = one_member_group()
    snap, _ = fold(snap, k5("B"), k3(2), k7("A", {TA: [0, 1], TB: [0]}), k7("B", {TA: [2, 3], TB: [1]}),
                   k6(2), k8("A", 2, {TA: [0, 1], TB: [0]}), k8("B", 2, {TA: [2, 3], TB: [1]}))
    return snap


MEMBER_IDS = st.sampled_from(["A", "B", "C"])


SPEC = st.dictionaries(st.sampled_from([TA, TB]), st.lists(st.integers(0, 3), max_size=3, unique=True),
                       max_size=2)


KIP_RECORDS = st.one_of(
    st.builds(k3, st.integers(0, 4)),
    st.just(k4()),
    st.builds(k5, MEMBER_IDS, st.sampled_from([None, "i1", "i2"])),
    st.builds(k6, st.integers(0, 4)),
    st.builds(k7, MEMBER_IDS, SPEC),
    st.builds(k8, MEMBER_IDS, st.integers(0, 4), SPEC, st.sampled_from([0, 1, 2, 127])),
    st.builds(tomb, st.sampled_from([3, 4, 6])),
    st.builds(tomb, st.sampled_from([5, 7, 8]), MEMBER_IDS),
)


CLASSIC_MEMBERS = st.lists(
    st.builds(member, MEMBER_IDS, st.sampled_from(["", "t0p0", "t0p1 t1p0", "t0p0 t0p1 t0p2"]),
              st.sampled_from([None, "i1"])),
    max_size=3,
)


RECORDS = st.one_of(
    KIP_RECORDS,
    st.builds(classic, st.integers(0, 4), CLASSIC_MEMBERS),
    st.just(classic_tombstone()),
)


A_ONLY = [member("A-1", "t0p0 t0p1 t0p2 t0p3")]


A_B = [member("A-1", "t0p0 t0p1"), member("B-1", "t0p2 t0p3")]


A_B_RESTARTED = [member("A-2", "t0p0 t0p1"), member("B-2", "t0p2 t0p3")]


# The same life on both coordinators: create a group (one member), add a member,
# restart the whole application (both leave: Empty; both come back).
LIFE_3_9 = [classic(1, A_ONLY), classic(2, A_B), classic(3, []), classic(4, A_B_RESTARTED)]


LIFE_4_X = [created_4x(), *LIFE_3_9]


def counters(snap: GroupSnapshot) -> tuple[int, int, int, int]:
    return snap.rebalances_total, snap.empty_transitions_total, snap.recreations_total, snap.partitions_moved_total


T1 = T0 + 600_000  # the applications restarted with the other group.protocol ten minutes later


def classic_pair(at: int) -> list[Record]:
    both = [member("C0", "t0p0 t0p1"), member("C1", "t0p2 t0p3")]
    return [classic(1, both, ts=at)]

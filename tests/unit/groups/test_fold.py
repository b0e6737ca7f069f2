"""Group-state folding: the rebalance definition, its causes and departures, on Kafka's record sequences.

Record sequences follow Kafka's coordinators (3.9 Scala ``GroupCoordinator``, 4.x
``GroupMetadataManager``): classic groups get one type 2 value per completed
generation (4.x adds a generation-0 ``protocolType ""`` value at creation, and both
write an Empty value with generation + 1 when the last member leaves); a KIP-848 member
leaving is tombstones 8, 7, 5 and a group-epoch bump, with the next target assignment
computed only when a remaining member heartbeats.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoders.records import Record, Struct
from streaming.groups.boundary import CHURN_LOG_CAP, CHURN_WINDOW_MS, classify_departure, imbalance_ratio
from streaming.groups.fold import apply_record, drop_expired, learn_topic_names
from streaming.groups.model import BoundaryMember, GroupSnapshot
from streaming.groups.summary import group_state, summarize
from streaming.protocol import (
    CAUSES,
    CLASSIC,
    CONSUMER,
    DEPARTURES,
    DURATION_BUCKET_LABELS,
    MEMBER_CHURN_CAP,
    REBALANCE_DURATION_BUCKETS,
    MemberChurn,
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


# ------------------------------------------------------------------ classic record builders


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


# ------------------------------------------------------------------ classic scenarios

RANGE_2 = [member("C0", "t0p0 t0p1 t1p0 t1p1"), member("C1", "t0p2 t1p2")]


def test_first_sight_is_a_baseline():
    snap, events = fold(None, classic(1, RANGE_2))
    assert events == []
    assert snap.baseline_taken and snap.rebalances_total == 0 and snap.last_rebalance_ms is None
    s = summarize(snap, T0)
    assert (s.group_type, s.state, s.generation) == (CLASSIC, "Stable", 1)
    assert (s.protocol, s.leader) == ("range", "C0")
    assert owned(s) == {"C0": 4, "C1": 2}
    assert s.assigned_partitions == 6
    assert s.imbalance_ratio == pytest.approx(4 / 3)


def test_roundrobin_is_even():
    snap, _ = fold(None, classic(1, [member("C0", "t0p0 t0p2 t1p1"), member("C1", "t0p1 t1p0 t1p2")],
                                 protocol="roundrobin"))
    assert summarize(snap, T0).imbalance_ratio == 1.0


def test_third_consumer_joins_range():
    snap, _ = fold(None, classic(1, RANGE_2))
    new = [member("C0", "t0p0 t1p0"), member("C1", "t0p1 t1p1"), member("C2", "t0p2 t1p2")]
    snap, events = fold(snap, classic(2, new, ts=T0 + 5000), t=T0 + 6000)
    [e] = events
    assert (e.old_generation, e.new_generation, e.event_time_ms) == (1, 2, T0 + 5000)
    assert e.duration_ms == 1000  # the sync phase: record time − the state timestamp
    assert e.causes == ("members_joined",) and e.joined_clients == ("client-C2@/10.0.0.1",)
    assert e.members_joined == ("C2",) and e.members_left == () and e.member_count == 3
    # t0p1/t1p1 C0→C1, t0p2/t1p2 C1→C2: exactly the owner changes
    assert set(e.moved_partitions) == {("t0", 1), ("t1", 1), ("t0", 2), ("t1", 2)}
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (4, 4, 4)
    assert e.imbalance_before == pytest.approx(4 / 3) and e.imbalance_after == 1.0
    assert (e.leader, e.leader_changed, e.protocol) == ("C0", False, "range")
    assert (snap.rebalances_total, snap.partitions_moved_total, snap.last_rebalance_ms) == (1, 4, T0 + 5000)
    s = summarize(snap, T0 + 6000)
    assert s.generation == 2 and s.rebalances_total == 1 and s.last_rebalance_ms == T0 + 5000


STICKY_3 = [
    member("C0", "t0p0 t1p1 t3p0"),
    member("C1", "t0p1 t2p0 t3p1"),
    member("C2", "t1p0 t2p1"),
]


def test_sticky_member_leaves_moves_only_its_partitions():
    snap, _ = fold(None, classic(7, STICKY_3, protocol="sticky"))
    after = [member("C0", "t0p0 t1p1 t3p0 t2p0"), member("C2", "t1p0 t2p1 t0p1 t3p1")]
    snap, [e] = fold(snap, classic(8, after, protocol="sticky"), t=T0 + 1)
    assert e.event_time_ms == T0 + 1 and e.duration_ms is None  # no state timestamp: the record time
    assert e.causes == ("members_left",) and e.departures == ("unknown",)  # no commit times given
    assert set(e.moved_partitions) == {("t0", 1), ("t2", 0), ("t3", 1)}
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (3, 3, 3)
    assert e.members_left == ("C1",) and e.members_joined == ()
    assert e.imbalance_before == pytest.approx(3 / (8 / 3)) and e.imbalance_after == 1.0


def test_roundrobin_member_leaves_moves_more():
    snap, _ = fold(None, classic(7, STICKY_3, protocol="roundrobin"))
    after = [member("C0", "t0p0 t1p0 t2p0 t3p0"), member("C2", "t0p1 t1p1 t2p1 t3p1")]
    snap, [e] = fold(snap, classic(8, after, protocol="roundrobin"))
    assert set(e.moved_partitions) == {("t0", 1), ("t1", 0), ("t1", 1), ("t2", 0), ("t3", 1)}


def test_cooperative_two_step_counts_each_move_once():
    snap, _ = fold(None, classic(3, [member("C0", "t0p0 t0p1 t0p2 t0p3")], protocol="cooperative-sticky"))
    # First step: C1 joins, C0 gives up t0p2/t0p3 and nobody gets them yet.
    step1 = [member("C0", "t0p0 t0p1"), member("C1", "")]
    snap, [e1] = fold(snap, classic(4, step1, protocol="cooperative-sticky"))
    assert (e1.partitions_moved, e1.partitions_revoked, e1.partitions_assigned) == (0, 2, 0)
    assert e1.members_joined == ("C1",)
    assert e1.imbalance_before == 1.0 and e1.imbalance_after == 2.0
    # Second step: C1 gets them; their last owner was C0, so they moved.
    step2 = [member("C0", "t0p0 t0p1"), member("C1", "t0p2 t0p3")]
    snap, [e2] = fold(snap, classic(5, step2, protocol="cooperative-sticky"))
    assert (e2.partitions_moved, e2.partitions_revoked, e2.partitions_assigned) == (2, 0, 2)
    assert e2.moved_partitions == (("t0", 2), ("t0", 3))
    assert snap.partitions_moved_total == 2 and snap.rebalances_total == 2


def test_new_partitions_are_assigned_not_moved():
    snap, _ = fold(None, classic(1, [member("C0", "t0p0"), member("C1", "t0p1")]))
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p2"), member("C1", "t0p1 t0p3")]))
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (0, 0, 2)
    assert e.causes == ("partitions_added",)


def test_static_member_restart_is_not_a_rebalance():
    static = [member("A-1", "t0p0 t0p1", instance="i-a"), member("B-1", "t0p2 t0p3", instance="i-b")]
    snap, _ = fold(None, classic(5, static, leader="A-1"))
    restarted = [member("A-1", "t0p0 t0p1", instance="i-a"), member("B-2", "t0p2 t0p3", instance="i-b")]
    snap, events = fold(snap, classic(5, restarted, leader="A-1"))
    assert events == [] and snap.rebalances_total == 0
    s = summarize(snap, T0)
    assert {(m.member, m.member_id) for m in s.members} == {("i-a", "A-1"), ("i-b", "B-2")}
    assert s.leader == "i-a"
    # A later rebalance that keeps the assignment moves nothing, joins and leaves nobody,
    # even though the leader restarted under a new member id in between.
    again = [member("A-2", "t0p0 t0p1", instance="i-a"), member("B-2", "t0p2 t0p3", instance="i-b")]
    snap, [e] = fold(snap, classic(6, again, leader="A-2"))
    assert (e.partitions_moved, e.members_joined, e.members_left, e.leader_changed) == (0, (), (), False)
    assert e.causes == ("static_member_replaced",)


def test_leader_change_is_flagged():
    snap, _ = fold(None, classic(1, RANGE_2, leader="C0"))
    snap, [e] = fold(snap, classic(2, [member("C1", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")], leader="C1"))
    assert (e.leader, e.leader_changed, e.members_left) == ("C1", True, ("C0",))
    assert e.causes == ("leader_changed", "members_left")


def test_last_member_leaving_is_an_empty_transition_not_a_rebalance():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, events = fold(snap, classic(2, []))  # Kafka's Empty record: generation + 1, no members
    assert events == []
    assert (snap.rebalances_total, snap.empty_transitions_total, snap.generations_advanced_total) == (0, 1, 1)
    s = summarize(snap, T0)
    assert (s.state, s.member_count, s.imbalance_ratio, s.assigned_partitions) == ("Empty", 0, None, 0)
    assert s.departures == {"unknown": 2} and s.rebalance_causes == {}
    # Nothing is referenced while the group is empty, so ownership history is gone:
    # members coming back are one rebalance, assigned their partitions, nothing moves.
    assert snap.last_owner == {}
    snap, [e] = fold(snap, classic(3, [member("C1", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")]))
    assert (e.old_generation, e.new_generation) == (2, 3)
    assert e.partitions_moved == 0 and e.partitions_assigned == 6 and e.partitions_revoked == 0
    assert e.members_joined == ("C1",) and e.members_left == () and e.causes == ("members_joined",)
    assert e.leader_changed is False  # nobody led the empty generation
    assert (snap.rebalances_total, snap.empty_transitions_total) == (1, 1)


def test_members_without_partitions_count_in_the_mean():
    assert imbalance_ratio([]) is None
    assert imbalance_ratio([0, 0]) == 1.0
    assert imbalance_ratio([3, 0, 0]) == 3.0
    assert imbalance_ratio([2, 2]) == 1.0


def test_non_consumer_protocols_keep_members_without_partitions():
    value = Struct(protocolType="connect", generation=4, protocol="sessioned", leader="w1",
                   currentStateTimestamp=-1,
                   members=(Struct(memberId="w1", clientId="c", clientHost="/h", sessionTimeout=10000,
                                   subscription=b"\x00", assignment=b"\x00", decodedSubscription=None,
                                   decodedAssignment=None, payloadError=None),))
    snap, _ = fold(None, Record(2, Struct(group=G), 1, value))
    s = summarize(snap, T0)
    assert (s.protocol_type, s.member_count) == ("connect", 1)
    assert (s.assigned_partitions, s.imbalance_ratio) == (0, 1.0)


def test_classic_tombstone_clears_metadata_and_the_next_group_is_a_recreated_baseline():
    snap, _ = fold(None, classic(4, RANGE_2), classic(5, [member("C0", "t0p0")]), classic(6, []))
    assert snap.has_metadata and snap.rebalances_total == 1
    snap, events = fold(snap, classic_tombstone())
    assert events == [] and snap is not None  # the caller drops it once its offsets are gone too
    assert not snap.has_metadata
    s = summarize(snap, T0)
    assert (s.state, s.generation, s.member_count) == ("Empty", None, 0)
    snap, events = fold(snap, classic(1, RANGE_2))
    assert events == [] and snap.baseline_taken
    assert (snap.rebalances_total, snap.recreations_total, snap.empty_transitions_total) == (1, 1, 1)


# ------------------------------------------------------------------ KIP-848 builders

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


def test_kip848_creation_is_a_baseline():
    snap = one_member_group()
    assert snap.group_type == CONSUMER and snap.baseline_taken and snap.rebalances_total == 0
    s = summarize(snap, T0)
    assert (s.group_type, s.protocol_type, s.protocol, s.leader) == (CONSUMER, "consumer", "uniform", "")
    assert (s.state, s.generation, s.member_count, s.assigned_partitions) == ("Stable", 1, 1, 6)
    assert s.members[0].client_id == "client-A"


def test_kip848_join_moves_target_owners_then_reconciles():
    snap = one_member_group()
    snap, events = fold(snap, k5("B"), k3(2))
    assert events == [] and group_state(snap) == "Assigning"
    snap, [e] = fold(snap, k7("A", {TA: [0, 1], TB: [0]}), k7("B", {TA: [2, 3], TB: [1]}), k6(2), t=T0 + 9)
    assert (e.group_type, e.old_generation, e.new_generation, e.event_time_ms) == (CONSUMER, 1, 2, T0 + 9)
    assert e.members_joined == ("B",) and e.member_count == 2
    assert e.moved_partitions == (("orders", 2), ("orders", 3), ("payments", 1))  # names from type 4
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (3, 3, 3)
    assert (e.leader, e.leader_changed, e.protocol) == (None, False, "uniform")
    assert e.imbalance_before == 1.0 and e.imbalance_after == 1.0
    assert group_state(snap) == "Reconciling"
    # A revokes first, B waits for the partitions to be released, then both settle.
    snap, _ = fold(snap, k8("A", 2, {TA: [0, 1], TB: [0]}, state=1, pending={TA: [2, 3], TB: [1]}),
                   k8("B", 2, {}, state=2))
    assert group_state(snap) == "Reconciling"
    assert owned(summarize(snap, T0)) == {"A": 3, "B": 0}
    snap, events = fold(snap, k8("A", 2, {TA: [0, 1], TB: [0]}), k8("B", 2, {TA: [2, 3], TB: [1]}))
    assert events == [] and group_state(snap) == "Stable"
    assert summarize(snap, T0).imbalance_ratio == 1.0


def test_kip848_member_behind_its_target_and_the_member_waiting_for_it():
    """Kafka keeps a member that must revoke at its old epoch (UNREVOKED_PARTITIONS) and moves one that
    only waits for partitions to the new epoch (UNRELEASED_PARTITIONS): epoch lag names the holder."""
    snap = one_member_group()
    snap, _ = fold(snap, k5("B"), k3(2), k7("A", {TA: [0, 1], TB: [0]}), k7("B", {TA: [2, 3], TB: [1]}), k6(2),
                   k8("A", 1, {TA: [0, 1], TB: [0]}, state=1, pending={TA: [2, 3], TB: [1]}), k8("B", 2, {}, state=2))
    behind = {m.member: (m.epoch_lag, m.unreconciled_partitions) for m in summarize(snap, T0).members}
    assert behind == {"A": (1, 3), "B": (0, 3)}
    snap, _ = fold(snap, k8("A", 2, {TA: [0, 1], TB: [0]}), k8("B", 2, {TA: [2, 3], TB: [1]}))
    assert {m.member: (m.epoch_lag, m.unreconciled_partitions) for m in summarize(snap, T0).members} == {
        "A": (0, 0), "B": (0, 0)}


def test_classic_members_have_no_epoch_lag():
    snap, _ = fold(None, classic(1, RANGE_2))
    assert {(m.epoch_lag, m.unreconciled_partitions) for m in summarize(snap, T0).members} == {(None, None)}


def two_member_group() -> GroupSnapshot:
    snap = one_member_group()
    snap, _ = fold(snap, k5("B"), k3(2), k7("A", {TA: [0, 1], TB: [0]}), k7("B", {TA: [2, 3], TB: [1]}),
                   k6(2), k8("A", 2, {TA: [0, 1], TB: [0]}), k8("B", 2, {TA: [2, 3], TB: [1]}))
    return snap


def test_kip848_member_leaves():
    snap = two_member_group()
    snap, events = fold(snap, tomb(8, "B"), tomb(7, "B"), tomb(5, "B"), k3(3), k7("A", ALL_A))
    assert events == []
    snap, [e] = fold(snap, k6(3))
    assert e.members_left == ("B",) and e.members_joined == () and e.member_count == 1
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (3, 3, 3)
    assert snap.rebalances_total == 2 and snap.partitions_moved_total == 6
    snap, _ = fold(snap, k8("A", 3, ALL_A))
    assert group_state(snap) == "Stable" and summarize(snap, T0).member_count == 1


def test_kip848_epoch_bump_without_changes_is_a_rebalance_that_moves_nothing():
    snap = two_member_group()
    snap, [e] = fold(snap, k3(3), k6(3))
    assert (e.old_generation, e.new_generation) == (2, 3)
    assert (e.partitions_moved, e.partitions_revoked, e.partitions_assigned) == (0, 0, 0)
    assert e.members_joined == () and e.members_left == ()
    assert snap.rebalances_total == 2
    assert group_state(snap) == "Reconciling"  # members still at epoch 2
    snap, _ = fold(snap, k8("A", 3, {TA: [0, 1], TB: [0]}), k8("B", 3, {TA: [2, 3], TB: [1]}))
    assert group_state(snap) == "Stable"


def test_kip848_group_deletion():
    snap = two_member_group()
    deletion = [tomb(8, "A"), tomb(8, "B"), tomb(7, "A"), tomb(7, "B"), tomb(6), tomb(5, "A"), tomb(5, "B"),
                tomb(4)]
    snap, events = fold(snap, *deletion)
    assert events == [] and snap is not None
    assert summarize(snap, T0).state == "Empty" and snap.has_metadata
    snap, events = fold(snap, tomb(3))
    assert events == [] and not snap.has_metadata


def test_kip848_static_member_replacement_is_not_a_rebalance():
    snap, _ = fold(None, k5("A-1", instance="i-a"), k5("B-1", instance="i-b"), k3(1),
                   k7("A-1", {TA: [0, 1]}), k7("B-1", {TA: [2, 3]}), k6(1),
                   k8("A-1", 1, {TA: [0, 1]}), k8("B-1", 1, {TA: [2, 3]}))
    # The coordinator swaps the member id without bumping any epoch.
    snap, events = fold(snap, tomb(8, "B-1"), tomb(7, "B-1"), tomb(5, "B-1"),
                        k5("B-2", instance="i-b"), k7("B-2", {TA: [2, 3]}), k8("B-2", 1, {TA: [2, 3]}))
    assert events == [] and snap.rebalances_total == 0
    assert {(m.member, m.member_id) for m in summarize(snap, T0).members} == {("i-a", "A-1"), ("i-b", "B-2")}
    assert group_state(snap) == "Stable"
    snap, [e] = fold(snap, k3(2), k6(2))
    assert (e.partitions_moved, e.partitions_revoked, e.members_joined, e.members_left) == (0, 0, (), ())


def test_kip848_records_out_of_order_after_compaction():
    # A current assignment surviving compaction before anything else about the group.
    snap, events = fold(None, k8("A", 5, {TA: [0, 1]}))
    assert events == [] and snap.group_type == CONSUMER and not snap.baseline_taken
    assert group_state(snap) == "Assigning" and snap.rebalances_total == 0
    snap, events = fold(snap, k3(7), k6(7))
    assert events == [] and snap.baseline_taken and snap.rebalances_total == 0
    # A target written after the epoch record (an older record surviving compaction)
    # belongs to the current epoch: the next diff sees B as its owner.
    snap, events = fold(snap, k5("B"), k7("B", {TA: [2, 3]}))
    assert events == []
    snap, [e] = fold(snap, k3(8), k7("A", {TA: [0, 1, 2]}), k7("B", {TA: [3]}), k6(8))
    assert e.moved_partitions == ((TA, 2),)  # no type 4: the topic id stands in for the name
    assert e.members_joined == ()


def test_topic_names_learnt_elsewhere_only_for_referenced_topics():
    snap, _ = fold(None, k5("A"), k3(1), k7("A", {TA: [0, 1]}), k6(1))
    learn_topic_names(snap, {TA: "orders", "unrelated-id": "other"})
    assert snap.topic_names == {TA: "orders"}
    snap, [e] = fold(snap, k5("B"), k3(2), k7("A", {TA: [0]}), k7("B", {TA: [1]}), k6(2))
    assert e.moved_partitions == (("orders", 1),)


def test_conversion_from_classic_keeps_counters():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")]))
    snap, events = fold(snap, classic_tombstone(), k5("C0"), k3(2), k7("C0", ALL_A), k6(2),
                        k8("C0", 2, ALL_A))
    assert events == [] and snap.group_type == CONSUMER
    assert snap.rebalances_total == 1
    snap, [e] = fold(snap, k5("C1"), k3(3), k7("C0", {TA: [0, 1, 2, 3]}), k7("C1", {TB: [0, 1]}), k6(3))
    assert e.partitions_moved == 2 and snap.rebalances_total == 2


def test_orphan_tombstones_never_create_or_break_state():
    for record_type in (2, 3, 4, 5, 6, 7, 8, 16):
        key = Struct(group=G) if record_type == 2 else Struct(groupId=G, memberId="X", regularExpression="x")
        assert apply_record(None, Record(record_type, key, None, None), T0) == (None, [])
    snap, _ = fold(None, classic(1, RANGE_2))
    before = snap.to_json()
    snap, events = fold(snap, tomb(8, "X"), tomb(7, "X"), tomb(5, "X"), tomb(6), tomb(3), tomb(4))
    assert events == [] and snap.to_json() == before
    kip = two_member_group()
    before = kip.to_json()
    kip, events = fold(kip, classic_tombstone(), tomb(8, "nobody"))
    assert events == [] and kip.to_json() == before


def test_offset_commits_are_not_folded():
    snap, _ = fold(None, classic(1, RANGE_2))
    with pytest.raises(ValueError):
        apply_record(snap, Record(1, Struct(group=G, topic="t", partition=0), 3, Struct(offset=1)), T0)


# ------------------------------------------------------------------ offsets, TTL, serialisation


def test_drop_expired():
    day = 86_400_000
    emptied, _ = fold(None, classic(1, RANGE_2), classic(2, []))
    assert drop_expired(emptied, T0 + 2 * day, day)
    assert not drop_expired(emptied, T0 + day, day)
    live, _ = fold(None, classic(1, RANGE_2))
    assert not drop_expired(live, T0 + 30 * day, day)


def test_snapshot_json_round_trip():
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0"), member("C1", "")]))
    kip = two_member_group()
    for original in (snap, kip):
        text = original.to_json()
        restored = GroupSnapshot.from_json(text)
        assert restored == original
        assert restored.to_json() == text
        assert summarize(restored, T0) == summarize(original, T0)
    assert len(snap.to_json()) < 1560  # with one measured rebalance in the duration histogram
    with pytest.raises(ValueError):
        GroupSnapshot.from_dict({**json.loads(snap.to_json()), "v": 99})


def test_restored_snapshot_keeps_detecting_movement():
    snap, _ = fold(None, classic(1, [member("C0", "t0p0 t0p1 t0p2 t0p3")], protocol="cooperative-sticky"))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0 t0p1"), member("C1", "")]))
    snap = GroupSnapshot.from_json(snap.to_json())
    snap, [e] = fold(snap, classic(3, [member("C0", "t0p0 t0p1"), member("C1", "t0p2 t0p3")]))
    assert e.partitions_moved == 2


def test_event_and_summary_serialise():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")]), commits={("t0", 2): T0})
    text = json.dumps(e.to_dict())
    assert RebalanceEvent.from_dict(json.loads(text)) == e
    s = summarize(snap, T0)
    assert s.member_churn == (MemberChurn("client-C1", "/10.0.0.1", 1),)
    assert type(s).from_json(s.to_json()) == s


# ------------------------------------------------------------------ robustness

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


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORDS, max_size=25))
def test_any_record_sequence_is_folded_consistently(records):
    snap, emitted = None, 0
    moved = 0
    for i, record in enumerate(records):
        snap, events = apply_record(snap, record, T0 + i)
        emitted += len(events)
        moved += sum(e.partitions_moved for e in events)
        if snap is None:
            continue
        assert snap.rebalances_total == emitted and snap.partitions_moved_total == moved
        assert GroupSnapshot.from_json(snap.to_json()) == snap
        s = summarize(snap, T0)
        assert s.imbalance_ratio is None or (math.isfinite(s.imbalance_ratio) and s.imbalance_ratio >= 1.0)
        for e in events:
            assert e.partitions_moved <= e.partitions_assigned


def test_ownership_history_and_topic_names_stay_bounded():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0 t0p1", topics=("t0",)),
                                     member("C1", "t0p2", topics=("t0",))]))
    assert {topic for topic, _ in snap.last_owner} == {"t0"}  # nobody subscribes to t1 any more
    kip = two_member_group()
    assert set(kip.topic_names) == {TA, TB}
    kip, _ = fold(kip, k5("A", topics=("orders",)), k5("B", topics=("orders",)), k3(3),
                  k7("A", {TA: [0, 1]}), k7("B", {TA: [2, 3]}), k6(3),
                  k8("A", 3, {TA: [0, 1]}), k8("B", 3, {TA: [2, 3]}))
    kip, _ = fold(kip, k3(4), k6(4))  # pruned at the next boundary: no record names payments now
    assert kip.topic_names == {TA: "orders"}
    assert {topic for topic, _ in kip.last_owner} == {TA}


# ------------------------------------------------------------------ one definition on 3.9 and 4.x

A_ONLY = [member("A-1", "t0p0 t0p1 t0p2 t0p3")]
A_B = [member("A-1", "t0p0 t0p1"), member("B-1", "t0p2 t0p3")]
A_B_RESTARTED = [member("A-2", "t0p0 t0p1"), member("B-2", "t0p2 t0p3")]

# The same life on both coordinators: create a group (one member), add a member,
# restart the whole application (both leave: Empty; both come back).
LIFE_3_9 = [classic(1, A_ONLY), classic(2, A_B), classic(3, []), classic(4, A_B_RESTARTED)]
LIFE_4_X = [created_4x(), *LIFE_3_9]


def counters(snap: GroupSnapshot) -> tuple[int, int, int, int]:
    return snap.rebalances_total, snap.empty_transitions_total, snap.recreations_total, snap.partitions_moved_total


@pytest.mark.parametrize("life", [LIFE_3_9, LIFE_4_X], ids=["3.9", "4.x"])
def test_group_life_counts_the_same_on_both_coordinators(life):
    snap, events = fold(None, *life[:-3])
    assert events == [] and snap.rebalances_total == 0  # creation is a baseline, on 4.x too
    snap, [add] = fold(snap, life[-3])
    assert add.causes == ("members_joined",) and add.partitions_moved == 2
    snap, events = fold(snap, life[-2])
    assert events == [] and counters(snap) == (1, 1, 0, 2)  # Empty: counted apart
    snap, [back] = fold(snap, life[-1])
    assert (back.members_joined, back.members_left, back.partitions_moved) == (("A-2", "B-2"), (), 0)
    assert counters(snap) == (2, 1, 0, 2)
    assert snap.generations_advanced_total == 3


@pytest.mark.parametrize("recreated", [[classic(1, A_B)], [created_4x(), classic(1, A_B)]], ids=["3.9", "4.x"])
def test_generation_going_down_is_a_recreation_not_a_rebalance(recreated):
    # The group was deleted and re-created while the monitor was away: the tombstone
    # was compacted, the dead group's last value is followed by the new group's.
    snap, _ = fold(None, *LIFE_3_9)
    before = counters(snap)
    snap, events = fold(snap, *recreated)
    assert events == []
    assert counters(snap) == (before[0], before[1], 1, before[3])
    assert snap.baseline_taken and summarize(snap, T0).generation == 1
    snap, [e] = fold(snap, classic(2, A_ONLY))  # the new group's life goes on normally
    assert e.causes == ("members_left",) and e.old_generation == 1


def test_kip848_last_member_leaving_counts_the_same_with_or_without_a_target_record():
    def leave_all(with_target: bool) -> GroupSnapshot:
        snap = two_member_group()
        records = [tomb(8, "A"), tomb(7, "A"), tomb(5, "A"), tomb(8, "B"), tomb(7, "B"), tomb(5, "B"), k3(3)]
        if with_target:
            records.append(k6(3))
        snap, events = fold(snap, *records)
        assert events == []
        return snap

    for snap in (leave_all(False), leave_all(True)):
        assert (snap.rebalances_total, snap.empty_transitions_total) == (1, 1)
        assert summarize(snap, T0).state == "Empty"
        # Both come back: one rebalance, nothing moves to or from nobody.
        snap, [e] = fold(snap, k5("A"), k5("B"), k3(4), k7("A", {TA: [0, 1], TB: [0]}),
                         k7("B", {TA: [2, 3], TB: [1]}), k6(4))
        assert (e.members_joined, e.members_left, e.partitions_moved) == (("A", "B"), (), 0)
        assert e.causes == ("members_joined",)
        assert (snap.rebalances_total, snap.empty_transitions_total) == (2, 1)


def test_kip848_merged_epoch_bumps_are_one_rebalance():
    # 4.3 batches target assignments: two joins bump the group epoch twice, one target follows.
    snap = one_member_group()
    snap, [e] = fold(snap, k5("B"), k3(2), k5("C"), k3(3), k7("A", {TA: [0, 1]}), k7("B", {TA: [2, 3]}),
                     k7("C", {TB: [0, 1]}), k6(3))
    assert (e.old_generation, e.new_generation, e.members_joined) == (1, 3, ("B", "C"))
    assert (snap.rebalances_total, snap.generations_advanced_total) == (1, 2)


def test_kip848_recreation_without_tombstones():
    snap = two_member_group()
    snap, _ = fold(snap, *[tomb(t, m) for m in "AB" for t in (8, 7, 5)], k3(3))
    snap, events = fold(snap, k5("C"), k3(1), k7("C", ALL_A), k6(1))
    assert events == [] and snap.recreations_total == 1 and snap.rebalances_total == 1


# ------------------------------------------------------------------ causes, each produced by its trigger


def test_cause_subscription_changed():
    snap, _ = fold(None, classic(1, [member("C0", "t0p0", topics=("t0",)), member("C1", "t0p1", topics=("t0",))]))
    widened = [member("C0", "t0p0 t1p0", topics=("t0", "t1")), member("C1", "t0p1 t1p1", topics=("t0", "t1"))]
    snap, [e] = fold(snap, classic(2, widened))
    assert e.causes == ("subscription_changed",)  # t1's partitions are new, but t1 was not subscribed


def test_cause_assignor_changed():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p2 t1p1"), member("C1", "t0p1 t1p0 t1p2")],
                                   protocol="roundrobin"))
    assert e.causes == ("assignor_changed",) and e.partitions_moved == 3


def test_cause_protocol_converted_both_ways():
    # Upgrade (4.x convertToConsumerGroup): the classic tombstone, then the consumer records
    # carrying the generation over as group and target epoch, then the join that triggered it.
    snap, _ = fold(None, classic(5, [member("C0", "t0p0 t0p1 t0p2 t0p3", topics=("orders",))], protocol="range"))
    conversion = [classic_tombstone(), k5("C0"), k3(5), k7("C0", {TA: [0, 1, 2, 3]}), k6(5),
                  k8("C0", 5, {TA: [0, 1, 2, 3]})]
    snap, events = fold(snap, *conversion)
    assert events == [] and snap.group_type == CONSUMER and snap.recreations_total == 0
    snap, [e] = fold(snap, k5("N"), k3(6), k7("C0", {TA: [0, 1]}), k7("N", {TA: [2, 3]}), k6(6))
    assert e.causes == ("members_joined", "protocol_converted")
    # Downgrade (convertToClassicGroup): consumer tombstones, then a classic value at the group epoch.
    downgrade = [tomb(8, "C0"), tomb(8, "N"), tomb(7, "C0"), tomb(7, "N"), tomb(6), tomb(5, "C0"), tomb(5, "N"),
                 tomb(4), tomb(3), classic(6, [member("C0", "t0p0 t0p1"), member("N", "t0p2 t0p3")])]
    snap, events = fold(snap, *downgrade)
    assert events == [] and snap.group_type == CLASSIC and snap.recreations_total == 0
    snap, [e] = fold(snap, classic(7, [member("C0", "t0p0 t0p1 t0p2 t0p3")]))
    assert e.causes == ("members_left", "protocol_converted")
    assert snap.rebalance_causes["protocol_converted"] == 2


T1 = T0 + 600_000  # the applications restarted with the other group.protocol ten minutes later


def test_offline_switch_classic_to_kip848_is_one_converted_rebalance():
    """Kafka's documented offline upgrade: every classic member stops (Kafka writes the Empty generation), the
    members start again with group.protocol=consumer. The first heartbeat finds an empty classic group and
    GroupMetadataManager.getOrMaybeCreateConsumerGroup deletes it (maybeDeleteEmptyClassicGroup: the type 2
    tombstone) and creates the consumer group, all in one append: every record carries that append's time."""
    snap, _ = fold(None, classic(3, RANGE_2))
    snap, _ = fold(snap, classic(4, []), t=T0 + 5)
    snap = GroupSnapshot.from_json(snap.to_json())  # the switch may come any batch later
    switch = [classic_tombstone(), k5("A", topics=("orders",)), k3(1), k7("A", {TA: [0, 1, 2, 3]}), k6(1),
              k8("A", 1, {TA: [0, 1, 2, 3]})]
    snap, events = fold(snap, *switch[:2], t=T1)
    snap = GroupSnapshot.from_json(snap.to_json())  # split across batches: the tombstone's time is kept
    snap, more = fold(snap, *switch[2:], t=T1)
    [e] = events + more
    assert e.causes == ("members_joined", "protocol_converted") and e.group_type == CONSUMER
    assert (e.new_generation, e.event_time_ms, e.members_joined) == (1, T1, ("A",))
    assert (snap.recreations_total, snap.rebalances_total, snap.empty_transitions_total) == (0, 1, 1)
    assert snap.rebalance_causes == {"members_joined": 1, "protocol_converted": 1}
    assert snap.generations_advanced_total == 1  # 3 -> 4; the new group's epoch 1 is no step down
    assert snap.deleted_type is None and snap.deleted_ms is None


def test_offline_switch_kip848_to_classic_is_one_converted_rebalance():
    """The downgrade: the last KIP-848 member leaves (tombstones 8, 7, 5 and the group-epoch bump), the
    applications start again with group.protocol=classic. The first JoinGroup finds an empty consumer group:
    maybeDeleteEmptyConsumerGroup writes its tombstones (target epoch, subscription metadata, group epoch) and
    the new classic group's generation-0 record in the same append; generation 1 completes later."""
    snap = one_member_group()
    snap, events = fold(snap, tomb(8, "A"), tomb(7, "A"), tomb(5, "A"), k3(2), t=T0 + 5)
    assert events == [] and snap.empty_transitions_total == 1
    snap, events = fold(snap, tomb(6), tomb(4), tomb(3), created_4x(T1), t=T1)
    assert events == [] and snap.group_type == CLASSIC and snap.recreations_total == 0
    snap, [e] = fold(snap, classic(1, RANGE_2, ts=T1 + 3_000), t=T1 + 3_010)
    assert e.causes == ("members_joined", "protocol_converted") and e.group_type == CLASSIC
    assert (snap.recreations_total, snap.rebalances_total) == (0, 1)
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")]), t=T1 + 60_000)
    assert e.causes == ("members_left",)  # converted once, then a classic group like any other


@pytest.mark.parametrize("new_protocol", [CLASSIC, CONSUMER])
def test_a_deleted_group_created_again_is_a_recreation_whatever_its_protocol(new_protocol):
    """kafka-consumer-groups --delete is an append of its own (the offsets' tombstones, then the group's);
    members coming later, with either protocol, make a re-created group: a new baseline, no rebalance."""
    snap, _ = fold(None, classic(3, RANGE_2))
    snap, _ = fold(snap, classic(4, []), t=T0 + 5)
    snap, _ = fold(snap, classic_tombstone(), t=T0 + 60_000)
    again = [created_4x(T1), classic(1, RANGE_2, ts=T1)] if new_protocol == CLASSIC else [
        k5("A"), k3(1), k7("A", ALL_A), k6(1), k8("A", 1, ALL_A)]
    snap, events = fold(snap, *again, t=T1)
    assert events == [] and snap.group_type == new_protocol
    assert (snap.recreations_total, snap.rebalances_total, snap.rebalance_causes) == (1, 0, {})


def test_a_deleted_kip848_group_created_again_as_classic_is_a_recreation():
    snap = one_member_group()
    snap, _ = fold(snap, tomb(8, "A"), tomb(7, "A"), tomb(5, "A"), k3(2), t=T0 + 5)
    snap, _ = fold(snap, tomb(6), tomb(4), tomb(3), t=T0 + 60_000)  # DeleteGroups
    snap, events = fold(snap, created_4x(T1), classic(1, RANGE_2, ts=T1), t=T1)
    assert events == [] and (snap.recreations_total, snap.rebalances_total) == (1, 0)


def test_cause_unknown_when_nothing_visible_changed():
    snap = two_member_group()
    snap, [e] = fold(snap, k3(3), k6(3))
    assert e.causes == ("unknown",)
    assert summarize(snap, T0).rebalance_causes == {"members_joined": 1, "unknown": 1}


# ------------------------------------------------------------------ how members left


def classic_pair(at: int) -> list[Record]:
    both = [member("C0", "t0p0 t0p1"), member("C1", "t0p2 t0p3")]
    return [classic(1, both, ts=at)]


@pytest.mark.parametrize(("gap_ms", "expected"), [
    (2_000, "left_cleanly"),       # leave(): committed on close, removed at once
    (48_000, "session_timeout"),   # SIGKILL: removed 45 s after its last heartbeat
    (310_000, "poll_timeout"),     # stopped polling: nothing committed for max.poll.interval.ms
])
def test_departure_classes_from_the_last_commit_on_the_leavers_partitions(gap_ms, expected):
    rebalance_at = T0 + 1_000_000
    snap, _ = fold(None, *classic_pair(T0))
    # C1 committed on t0p2 gap_ms before; C0's later commits say nothing about C1.
    commits = {("t0", 2): rebalance_at - gap_ms, ("t0", 3): rebalance_at - gap_ms - 10, ("t0", 0): rebalance_at}
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t0p3")], ts=rebalance_at),
                     t=rebalance_at + 50, commits=commits)
    assert e.members_left == ("C1",) and e.departures == (expected,)
    assert summarize(snap, T0).departures == {expected: 1}


def test_departure_unknown_without_commits_and_in_empty_transitions():
    snap, _ = fold(None, *classic_pair(T0))
    snap, _ = fold(snap, classic(2, []), commits={("t0", 0): T0 - 1_000})
    assert snap.departures == {"left_cleanly": 1, "unknown": 1}  # C1 never committed


def test_kip848_departure_time_is_the_members_tombstone():
    snap = two_member_group()
    leave_at = T0 + 600_000
    commits = {("payments", 1): leave_at - 50_000}  # B owned orders:2,3 and payments:1
    snap, _ = fold(snap, tomb(8, "B"), tomb(7, "B"), tomb(5, "B"), k3(3), t=leave_at)
    snap, [e] = fold(snap, k7("A", ALL_A), k6(3), t=leave_at + 400_000, commits=commits)
    assert e.departures == ("session_timeout",)  # 50 s ≥ the broker's default 45 s, < 300 s
    assert e.duration_ms == 400_000  # from the epoch bump to the target catching up


def test_rebalance_duration_histogram():
    """Measured rebalances go into the group's histogram; unmeasured ones, baselines and Empty do not."""
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))  # baseline: not a rebalance
    assert summarize(snap, T0).rebalance_durations == ()
    three = [member("C0", "t0p0 t1p0"), member("C1", "t0p1 t1p1"), member("C2", "t0p2 t1p2")]
    snap, [e] = fold(snap, classic(2, three, ts=T0 + 5000), t=T0 + 5040)  # 40 ms sync phase
    assert e.duration_ms == 40
    snap, _ = fold(snap, classic(3, RANGE_2), t=T0 + 9000)  # no state timestamp: not measured
    snap, _ = fold(snap, classic(4, three, ts=T0 + 10_000), t=T0 + 10_000 + 400_000)  # beyond every bound
    snap, _ = fold(snap, classic(5, [], ts=T0 + 500_000), t=T0 + 500_010)  # Empty: not a rebalance
    s = summarize(snap, T0 + 500_010)
    assert (s.rebalances_total, s.empty_transitions_total) == (3, 1)
    assert len(s.rebalance_durations) == len(REBALANCE_DURATION_BUCKETS) + 1 == len(DURATION_BUCKET_LABELS)
    cumulative = dict(zip(DURATION_BUCKET_LABELS, s.rebalance_durations, strict=True))
    assert (cumulative["0.025"], cumulative["0.05"], cumulative["300.0"], cumulative["+Inf"]) == (0, 1, 1, 2)
    assert s.rebalance_duration_sum_ms == 40 + 400_000
    restored = GroupSnapshot.from_json(snap.to_json())
    assert summarize(restored, T0 + 500_010) == s


def test_format_3_snapshot_reads_with_an_empty_histogram():
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))
    old = {**json.loads(snap.to_json()), "v": 3}
    assert "rebalance_durations" not in old  # never written for a group without a measured rebalance
    assert GroupSnapshot.from_dict(old).rebalance_durations == {}


def test_classify_departure_thresholds():
    m = BoundaryMember("m", session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    assert [classify_departure(m, 100_000 - gap, 100_000) for gap in (-5, 9_999, 10_000, 59_999, 60_000)] == [
        "left_cleanly", "left_cleanly", "session_timeout", "session_timeout", "poll_timeout"]
    assert classify_departure(m, None, 100_000) == "unknown"
    assert set(DEPARTURES) == {"left_cleanly", "session_timeout", "poll_timeout", "unknown"}


# ------------------------------------------------------------------ churn


def test_member_churn_ranks_the_clients_coming_and_going_in_the_window():
    snap, _ = fold(None, classic(1, [member("S-0", "t0p0 t0p1", client="steady"),
                                     member("F-0", "t0p2 t0p3", client="flappy")]), t=T0)
    generation = 1
    for i in range(1, 4):  # "flappy" crashes and comes back three times
        generation += 1
        snap, _ = fold(snap, classic(generation, [member("S-0", "t0p0 t0p1 t0p2 t0p3", client="steady")]),
                       t=T0 + i * 60_000)
        generation += 1
        snap, _ = fold(snap, classic(generation, [member("S-0", "t0p0 t0p1", client="steady"),
                                                  member(f"F-{i}", "t0p2 t0p3", client="flappy")]),
                       t=T0 + i * 60_000 + 1)
    now = T0 + 4 * 60_000
    assert summarize(snap, now).member_churn == (MemberChurn("flappy", "/10.0.0.1", 6),)
    assert summarize(snap, now + CHURN_WINDOW_MS).member_churn == ()  # the window moved on
    assert len(summarize(snap, now).member_churn) <= MEMBER_CHURN_CAP


def test_member_churn_is_capped():
    many = [member(f"M{i}", f"t0p{i}", client=f"c{i}") for i in range(MEMBER_CHURN_CAP + 5)]
    snap, _ = fold(None, classic(1, many[:1]), classic(2, many))
    churn = summarize(snap, T0).member_churn
    assert len(churn) == MEMBER_CHURN_CAP and all(entry.joins_and_leaves == 1 for entry in churn)


# ------------------------------------------------------------------ the definition, on any sequence


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORDS, max_size=25))
def test_every_event_meets_the_definition(records):
    snap = None
    for i, record in enumerate(records):
        before = snap.epoch_generation if snap is not None else None
        snap, events = apply_record(snap, record, T0 + i, {})
        for e in events:
            assert e.member_count > 0 and e.new_generation != e.old_generation and e.old_generation == before
            assert e.causes and set(e.causes) <= set(CAUSES)
            assert len(e.departures) == len(e.members_left) == len(e.left_clients)
            assert set(e.departures) <= {"unknown"}  # no commit known
        if snap is not None:
            assert sum(snap.rebalance_causes.values()) >= snap.rebalances_total
            assert sum(snap.departures.values()) >= sum(len(e.members_left) for e in events)
            assert len(snap.churn) <= CHURN_LOG_CAP


@pytest.mark.parametrize(("change", "cause"), [
    # 4.0's partition metadata (type 4) grows, the epoch bumps, the new partitions are assigned.
    ([k3(3), k7("A", {TA: [0, 1, 4]}), k7("B", {TA: [2, 3, 5], TB: [1]}), k6(3)], "partitions_added"),
    ([k5("A", topics=("orders",)), k3(3), k7("A", {TA: [0, 1]}), k7("B", {TA: [2, 3], TB: [0, 1]}), k6(3)],
     "subscription_changed"),
    ([k5("A", assignor="range"), k5("B", assignor="range"), k3(3), k6(3)], "assignor_changed"),
])
def test_kip848_causes(change, cause):
    snap, [e] = fold(two_member_group(), *change)
    assert e.causes == (cause,) and snap.rebalance_causes[cause] == 1

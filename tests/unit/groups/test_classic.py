"""Classic groups: the rebalance definition on the type 2 values Kafka writes per generation."""

from __future__ import annotations

import pytest

from decoders.records import Record, Struct
from streaming.groups.boundary import imbalance_ratio
from streaming.groups.summary import summarize
from streaming.protocol import (
    CLASSIC,
)
from tests.support.group_records import (
    RANGE_2,
    STICKY_3,
    T0,
    G,
    classic,
    classic_tombstone,
    fold,
    member,
    owned,
)


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

"""The fold's dispatch: one definition on 3.9 and 4.x coordinators, each cause produced by its trigger,
and every event meeting the definition on any record sequence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.groups.boundary import CHURN_LOG_CAP
from streaming.groups.fold import apply_record
from streaming.groups.model import GroupSnapshot
from streaming.groups.summary import summarize
from streaming.protocol import (
    CAUSES,
    CLASSIC,
    CONSUMER,
)
from tests.support.group_records import (
    A_B,
    A_ONLY,
    ALL_A,
    LIFE_3_9,
    LIFE_4_X,
    RANGE_2,
    RECORDS,
    T0,
    T1,
    TA,
    TB,
    classic,
    classic_tombstone,
    counters,
    created_4x,
    fold,
    k3,
    k5,
    k6,
    k7,
    k8,
    member,
    one_member_group,
    tomb,
    two_member_group,
)


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
            # No commit known: no timeout can be told, only a leave right after the member's last record
            # (the KIP-848 rule, boundary.py) or nothing.
            assert set(e.departures) <= {"unknown", "left_cleanly"}
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

"""KIP-848 groups: the rebalance definition on the records the 4.x coordinator writes (types 3 to 8)."""

from __future__ import annotations

import pytest

from decoders.records import Record, Struct
from streaming.groups.fold import apply_record, learn_topic_names
from streaming.groups.summary import group_state, summarize
from streaming.protocol import (
    CONSUMER,
)
from tests.support.group_records import (
    ALL_A,
    RANGE_2,
    T0,
    TA,
    TB,
    G,
    classic,
    classic_tombstone,
    fold,
    k3,
    k5,
    k6,
    k7,
    k8,
    member,
    one_member_group,
    owned,
    tomb,
    two_member_group,
)


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

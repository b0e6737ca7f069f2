"""Share groups' partition counts (issue 31, item 6): a partition several members share counts once in
the group's total, and no imbalance ratio is made from partitions per member."""

from __future__ import annotations

from decoders.records import Record, Struct
from streaming.groups.model import GroupSnapshot
from streaming.groups.summary import summarize
from streaming.metrics.groups import group_lines
from tests.unit.groups.test_share_streams import T0, TOPIC_ID, G, fold, member_key, share_join, tomb

OTHER_ID = "Zb1xWJpGSQaW2q0Uu0q9Pg"


def test_a_partition_shared_by_several_members_counts_once():
    snap = fold(None, *share_join("A", 1, [0, 1, 2]))
    snap = fold(snap, *share_join("B", 2, [0, 1]))
    snap = fold(snap, *share_join("C", 3, [2, 3]))
    s = summarize(snap, T0)
    assert [m.assigned_partitions for m in s.members] == [3, 2, 2]  # each member's own count is unchanged
    assert s.assigned_partitions == 4  # t:0-3, not 3 + 2 + 2
    assert s.imbalance_ratio is None
    text = group_lines("c", s, {}, 0, False).by_family
    assert text["kafka_consumergroup_assigned_partitions"] == [
        f'kafka_consumergroup_assigned_partitions{{cluster="c",group="{G}"}} 4\n']
    assert "kafka_consumergroup_assignment_imbalance_ratio" not in text
    # The same partition number of another topic is another partition; a snapshot keeps the sets.
    snap = fold(snap, Record(14, member_key("C"), 0, Struct(
        memberEpoch=3, previousMemberEpoch=2, state=0,
        assignedPartitions=(Struct(topicId=TOPIC_ID, partitions=(2, 3)), Struct(topicId=OTHER_ID, partitions=(0,))))))
    snap = GroupSnapshot.from_json(snap.to_json())
    assert summarize(snap, T0).assigned_partitions == 5


def test_a_member_leaving_gives_up_its_share():
    snap = fold(None, *share_join("A", 1, [0, 1]))
    snap = fold(snap, *share_join("B", 2, [2]))
    snap = fold(snap, tomb(14, "B"))  # its current assignment tombstone: holds nothing now
    assert summarize(snap, T0).assigned_partitions == 2
    snap = fold(snap, tomb(13, "B"), tomb(10, "B"))
    assert summarize(snap, T0).assigned_partitions == 2


def test_a_snapshot_written_before_the_sets_were_kept_still_loads():
    snap = fold(None, *share_join("A", 1, [0, 1]))
    d = snap.to_dict()
    for member in d["other"]["members"].values():
        del member["partitions"]
    restored = GroupSnapshot.from_dict(d)
    assert restored.other is not None and restored.other.members["A"].assigned == 2
    assert summarize(restored, T0).assigned_partitions == 2  # its count, until its next current assignment
    restored = fold(restored, *share_join("B", 2, [0]))
    assert summarize(restored, T0).assigned_partitions == 3  # A's count (no set) + B's set

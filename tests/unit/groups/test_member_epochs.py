"""KIP-848 member epochs that are sentinels, not epochs (issue 31, item 6): no epoch lag from them."""

from __future__ import annotations

from decoders.records import Record, Struct
from streaming.groups.fold import apply_record
from streaming.groups.summary import summarize
from streaming.metrics.groups import group_lines

T0 = 1_700_000_000_000
G = "kip"


def _member(member: str, instance: str | None, epoch: int) -> list[Record]:
    key = Struct(groupId=G, memberId=member)
    return [
        Record(5, key, 0, Struct(instanceId=instance, clientId=f"cli-{member}", clientHost="/h",
                                 subscribedTopicNames=("t0",), serverAssignor="uniform")),
        Record(7, key, 0, Struct(topicPartitions=(Struct(topicId="id0", partitions=(int(member[1:]),)),))),
        Record(8, key, 0, Struct(memberEpoch=epoch, previousMemberEpoch=max(epoch - 1, 0), state=0,
                                 assignedPartitions=(Struct(topicId="id0", partitions=(int(member[1:]),)),),
                                 partitionsPendingRevocation=())),
    ]


def summary_with(epochs: dict[str, tuple[str | None, int]]):
    records = [Record(3, Struct(groupId=G), 0, Struct(epoch=7)), Record(6, Struct(groupId=G), 0,
                                                                         Struct(assignmentEpoch=7))]
    for member, (instance, epoch) in epochs.items():
        records += _member(member, instance, epoch)
    snap = None
    for r in records:
        snap, _ = apply_record(snap, r, T0)
    return summarize(snap, T0)


def test_a_static_member_away_has_no_epoch_lag_and_no_series():
    """m1 left temporarily (static: Kafka writes its current assignment at epoch -2 and keeps it); m2 is
    one epoch behind; m0 is reconciled."""
    summary = summary_with({"m0": (None, 7), "m1": ("i-1", -2), "m2": (None, 6)})
    lags = {m.member_id: m.epoch_lag for m in summary.members}
    assert lags == {"m0": 0, "m1": None, "m2": 1}  # not 7 - (-2) = 9
    text = "".join(group_lines("c", summary, {}, 0, False).by_family["kafka_consumergroup_member_epoch_lag"])
    assert 'member="i-1"' not in text and text.count("\n") == 2
    # Its assignment is still its own until it rejoins or its session ends.
    assert {m.member_id: m.assigned_partitions for m in summary.members}["m1"] == 1


def test_a_leaving_member_epoch_minus_one_has_no_epoch_lag_either():
    summary = summary_with({"m0": (None, 7), "m1": (None, -1)})
    assert {m.member_id: m.epoch_lag for m in summary.members} == {"m0": 0, "m1": None}

"""Share (KIP-932) and streams (KIP-1071) groups folded from the records Kafka 4.x writes for them.

Field names and layouts are the decoder's, which tests/unit/decoders/test_kafka_oracle.py checks
against Kafka 4.3.1's own generated classes (and the last test folds the records those classes write).
Sequences follow Kafka's GroupMetadataManager: a
member joining writes its metadata, the group epoch, the target assignment (members, then the
epoch) and its current assignment; a member leaving writes its current, target and metadata
tombstones and a group-epoch bump; a deleted group ends with the group-epoch tombstone.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from decoders import decode
from decoders.records import Record, Struct
from streaming.groups.fold import apply_record
from streaming.groups.model import GroupSnapshot, plain
from streaming.groups.summary import summarize
from streaming.protocol import SHARE, STREAMS
from tests.support.kafka_oracle import encode_with_kafka
from tests.unit.decoders.test_kafka_oracle import KAFKA_4, kafka_json

G = "g"
T0 = 1_700_000_000_000
TOPIC_ID = "q1YFPGt9Q3-7VA4kbn4Fuw"


def fold(snapshot: GroupSnapshot | None, *records: Record, t: int = T0) -> GroupSnapshot | None:
    for record in records:
        snapshot, events = apply_record(snapshot, record, t)
        assert events == []  # no rebalance events for these groups
    return snapshot


def group_key() -> Struct:
    return Struct(groupId=G)


def member_key(member: str) -> Struct:
    return Struct(groupId=G, memberId=member)


def tomb(record_type: int, member: str | None = None) -> Record:
    return Record(record_type, group_key() if member is None else member_key(member), None, None)


# ------------------------------------------------------------------ share groups (types 9-15)


def share_join(member: str, epoch: int, partitions: list[int]) -> list[Record]:
    held = (Struct(topicId=TOPIC_ID, partitions=tuple(partitions)),)
    return [
        Record(10, member_key(member), 0, Struct(rackId=None, clientId=f"console-share-{member}",
                                                  clientHost="/127.0.0.1", subscribedTopicNames=("orders",))),
        Record(11, group_key(), 0, Struct(epoch=epoch, metadataHash=7)),
        Record(13, member_key(member), 0, Struct(topicPartitions=held)),
        Record(12, group_key(), 0, Struct(assignmentEpoch=epoch, assignmentTimestamp=T0)),
        Record(14, member_key(member), 0, Struct(memberEpoch=epoch, previousMemberEpoch=epoch - 1, state=0,
                                                  assignedPartitions=held)),
    ]


def test_a_share_group_is_shown_as_one_with_its_members():
    snap = fold(None, *share_join("A", 1, [0, 1]))
    snap = fold(snap, *share_join("B", 2, [0, 1]))  # share groups may give both members every partition
    assert plain(snap) == dataclasses.asdict(snap)  # what the JSON is made of, as asdict made it
    snap = GroupSnapshot.from_json(snap.to_json())
    s = summarize(snap, T0)
    assert (s.group_type, s.protocol_type, s.state, s.generation) == (SHARE, SHARE, "Stable", 2)
    assert [(m.member, m.client_id, m.assigned_partitions) for m in s.members] == [
        ("A", "console-share-A", 2), ("B", "console-share-B", 2)]
    assert (s.rebalances_total, s.recreations_total, s.generations_advanced_total) == (0, 0, 1)
    # State-partition metadata names the topic: its id is learnt.
    snap = fold(snap, Record(15, group_key(), 0, Struct(
        initializingTopics=(), deletingTopics=(),
        initializedTopics=(Struct(topicId=TOPIC_ID, topicName="orders", partitions=(0, 1)),))))
    assert snap.topic_label(TOPIC_ID) == "orders"


def test_a_share_member_leaving_then_the_group_deleted():
    snap = fold(None, *share_join("A", 1, [0, 1]))
    snap = fold(snap, tomb(14, "A"), tomb(13, "A"), tomb(10, "A"), Record(11, group_key(), 0,
                                                                           Struct(epoch=2, metadataHash=0)))
    s = summarize(snap, T0)
    assert (s.group_type, s.state, s.member_count) == (SHARE, "Empty", 0)
    snap = fold(snap, tomb(12), tomb(11), t=T0 + 5)
    assert not snap.has_metadata and snap.deleted_type == SHARE
    snap = fold(snap, *share_join("C", 1, [0]), t=T0 + 60_000)
    assert snap.group_type == SHARE and snap.recreations_total == 1


def test_share_records_never_make_an_empty_classic_group():
    snap = fold(None, Record(11, group_key(), 0, Struct(epoch=1, metadataHash=0)))
    s = summarize(snap, T0)
    assert (s.group_type, s.state, s.member_count) == (SHARE, "Empty", 0)
    assert fold(None, tomb(11), tomb(14, "A")) is None  # tombstones alone create nothing


# ------------------------------------------------------------------ streams groups (types 17-23)


def tasks(*partitions: int) -> tuple[Struct, ...]:
    return (Struct(subtopologyId="0", partitions=tuple(partitions)),)


def streams_member(member: str, instance: str | None = None) -> Record:
    return Record(19, member_key(member), 0, Struct(
        instanceId=instance, rackId=None, clientId=f"app-{member}", clientHost="/127.0.0.1",
        rebalanceTimeoutMs=300000, topologyEpoch=0, processId=f"p-{member}", userEndpoint=None, clientTags=()))


def streams_current(member: str, epoch: int, active: tuple[Struct, ...], state: int = 1) -> Record:
    return Record(22, member_key(member), 0, Struct(
        memberEpoch=epoch, previousMemberEpoch=epoch - 1, state=state, activeTasks=active, standbyTasks=(),
        warmupTasks=(), activeTasksPendingRevocation=(), standbyTasksPendingRevocation=(),
        warmupTasksPendingRevocation=()))


def streams_target(member: str, active: tuple[Struct, ...]) -> Record:
    return Record(21, member_key(member), 0, Struct(activeTasks=active, standbyTasks=(), warmupTasks=()))


def streams_epoch(epoch: int, validated: int = 0) -> Record:
    """As the decoder reads it: the validated topology epoch is a tagged field, left out while -1."""
    tagged = {"validatedTopologyEpoch": validated} if validated != -1 else {}
    return Record(17, group_key(), 0, Struct(epoch=epoch, metadataHash=3, lastAssignmentConfigs=(), **tagged))


def streams_topology(epoch: int, source: str = "in") -> Record:
    return Record(23, group_key(), 0, Struct(epoch=epoch, subtopologies=(Struct(
        subtopologyId="0", sourceTopics=(source,), sourceTopicRegex=(), stateChangelogTopics=(),
        repartitionSinkTopics=(), repartitionSourceTopics=(), copartitionGroups=()),)))


def assignment_epoch(epoch: int) -> Record:
    return Record(20, group_key(), 0, Struct(assignmentEpoch=epoch, assignmentTimestamp=T0))


def test_a_streams_group_follows_its_epochs_and_members():
    snap = fold(None, streams_member("A"), streams_topology(0), streams_epoch(1),
                streams_target("A", tasks(0, 1, 2, 3)), assignment_epoch(1), streams_current("A", 1, tasks(0, 1, 2, 3)))
    s = summarize(snap, T0)
    assert (s.group_type, s.protocol_type, s.state, s.generation) == (STREAMS, STREAMS, "Stable", 1)
    assert [(m.member, m.client_id, m.assigned_partitions) for m in s.members] == [("A", "app-A", 4)]
    # B joins: the group epoch moves first (Assigning), then the target; A still holds all (Reconciling).
    snap = fold(snap, streams_member("B", instance="b-0"), streams_epoch(2))
    assert summarize(snap, T0).state == "Assigning"
    snap = fold(snap, streams_target("A", tasks(0, 1)), streams_target("B", tasks(2, 3)), assignment_epoch(2))
    assert summarize(snap, T0).state == "Reconciling"
    snap = fold(snap, streams_current("A", 2, tasks(0, 1)), streams_current("B", 2, tasks(2, 3)))
    assert plain(snap) == dataclasses.asdict(snap) and snap.other is not None
    snap = GroupSnapshot.from_json(snap.to_json())
    s = summarize(snap, T0)
    assert s.state == "Stable" and [(m.member, m.assigned_partitions) for m in s.members] == [("A", 2), ("b-0", 2)]
    assert s.generations_advanced_total == 1 and s.rebalances_total == 0


def test_a_streams_app_joining_goes_assigning_reconciling_stable_as_kafka_4_3_wrote_it():
    """The records Kafka 4.3.1 wrote when tests/jvm/StreamsApp.java joined (one member, a source topic of two
    partitions), in their order. Kafka numbers a settled streams member 1, not KIP-848's 0: read as 0, the
    group never left Reconciling here."""
    snap = fold(None, streams_member("A"), streams_topology(0), streams_epoch(2),
                streams_current("A", 1, ()))  # epoch 1, no tasks, before the first target
    assert summarize(snap, T0).state == "Assigning"
    snap = fold(snap, streams_target("A", tasks(0, 1)), assignment_epoch(2))  # 3 s later
    assert summarize(snap, T0).state == "Reconciling"
    snap = fold(snap, streams_current("A", 2, tasks(0, 1)))  # 2 s later: the member holds both tasks
    s = summarize(snap, T0)
    assert (s.state, [m.assigned_partitions for m in s.members]) == ("Stable", [2])
    unsettled = fold(snap, streams_current("A", 2, tasks(0, 1), state=2))  # UNREVOKED_TASKS
    assert summarize(unsettled, T0).state == "Reconciling"


def test_a_streams_group_whose_topology_kafka_has_not_validated_is_not_ready():
    """Kafka assigns no task until it has validated the topology's epoch against the cluster's topics
    (StreamsGroup: NotReady before Assigning); the group metadata records the epoch it validated. The first
    fold is what Kafka 4.3.1 wrote for StreamsApp.java started before its source topic existed (ListGroups
    said NotReady throughout): read without the validated epoch, a Stable group holding nothing."""
    missing_source = (streams_member("A"), streams_topology(0), streams_epoch(2, validated=-1),
                      streams_current("A", 1, ()), streams_target("A", ()), assignment_epoch(2),
                      streams_current("A", 2, ()))
    snap = fold(None, *missing_source)
    assert summarize(snap, T0).state == "NotReady"
    snap = fold(snap, streams_epoch(3, validated=0), streams_target("A", tasks(0, 1)), assignment_epoch(3),
                streams_current("A", 3, tasks(0, 1)))
    assert summarize(snap, T0).state == "Stable"
    snap = fold(snap, streams_topology(1, source="in-v2"))  # a new topology, not validated yet
    assert summarize(GroupSnapshot.from_json(snap.to_json()), T0).state == "NotReady"
    development_layout = Record(17, group_key(), 0, Struct(epoch=1))  # no validated epoch: readiness unknown
    unknown = fold(None, streams_member("A"), development_layout, streams_current("A", 1, tasks(0)),
                   streams_target("A", tasks(0)), assignment_epoch(1))
    assert summarize(unknown, T0).state == "Stable"


def test_a_streams_group_restored_from_a_snapshot_without_its_topology_epoch_is_not_shown_not_ready():
    """A snapshot written before the topology epochs were kept: the next group epoch brings a validated epoch,
    but the topology record comes again only when the topology changes, so readiness stays unknown."""
    snap = fold(None, streams_member("A"), streams_topology(0), streams_epoch(1), streams_target("A", tasks(0, 1)),
                assignment_epoch(1), streams_current("A", 1, tasks(0, 1)))
    old = json.loads(snap.to_json())
    for field_name in ("topology_epoch", "validated_topology_epoch"):
        del old["other"][field_name]
    restored = GroupSnapshot.from_json(json.dumps(old))
    assert summarize(restored, T0).state == "Stable"
    snap = fold(restored, streams_member("B"), streams_epoch(2), streams_target("A", tasks(0)),
                streams_target("B", tasks(1)), assignment_epoch(2), streams_current("A", 2, tasks(0)),
                streams_current("B", 2, tasks(1)))
    assert summarize(snap, T0).state == "Stable"


# ------------------------------------------------------------------ the same records, written by Kafka's classes

_MESSAGES = {10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata", 12: "ShareGroupTargetAssignmentMetadata",
             13: "ShareGroupTargetAssignmentMember", 14: "ShareGroupCurrentMemberAssignment",
             17: "StreamsGroupMetadata", 19: "StreamsGroupMemberMetadata", 20: "StreamsGroupTargetAssignmentMetadata",
             21: "StreamsGroupTargetAssignmentMember", 22: "StreamsGroupCurrentMemberAssignment",
             23: "StreamsGroupTopology"}


def _written_by_kafka(records: list[Record]) -> list[Record]:
    """Each record's key and value as Kafka 4.3.1's generated classes write them, read back by the decoder."""
    if not any(KAFKA_4.glob("kafka-clients-*.jar")):
        pytest.skip(f"Kafka jars missing in {KAFKA_4} (the Makefile fetches them)")
    specs = []
    for r in records:
        name = _MESSAGES[r.record_type]
        specs += [{"message": f"{name}Key", "version": 0, "prefix": r.record_type, "data": kafka_json(r.key)},
                  {"message": f"{name}Value", "version": 0, "prefix": 0, "data": kafka_json(r.value)}]
    encoded = encode_with_kafka(KAFKA_4, specs)
    decoded = [decode(k, v) for k, v in zip(encoded[0::2], encoded[1::2], strict=True)]
    assert all(isinstance(r, Record) for r in decoded), decoded
    return decoded  # type: ignore[return-value]


def test_records_written_by_kafka_fold_the_same():
    share = share_join("A", 1, [0, 1]) + share_join("B", 2, [0, 1])
    streams = [streams_member("A"), streams_topology(0), streams_epoch(1), streams_target("A", tasks(0, 1)),
               Record(20, group_key(), 0, Struct(assignmentEpoch=1, assignmentTimestamp=T0)),
               streams_current("A", 1, tasks(0, 1))]
    for records, group_type in ((share, SHARE), (streams, STREAMS)):
        ours, kafkas = summarize(fold(None, *records), T0), summarize(fold(None, *_written_by_kafka(records)), T0)
        assert kafkas == ours and kafkas.group_type == group_type and kafkas.member_count >= 1

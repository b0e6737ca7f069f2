"""Share groups (KIP-932, types 9–15) and streams groups (KIP-1071, types 17–23): type, epochs, members.

Kafka 4.x writes both to the offsets topic beside classic and KIP-848 groups, in KIP-848's
layout: a group epoch (11 / 17), a target assignment epoch (12 / 20), per member its
metadata (10 / 19), target (13 / 21) and current assignment (14 / 22), plus topic and
topology records. Deleting a member writes its tombstones (current, target, metadata last);
deleting the group ends with the group-epoch tombstone. This fold keeps what those
records say: the group's true type, its epochs, its members with client id, host, member
epoch, state and how much each holds (share: partitions, which members may share;
streams: active tasks), and a streams group's topology epoch beside the one Kafka last
validated. No rebalance events are made for them; their group-epoch steps count in
``generations_advanced_total`` like any group's.

Kafka numbers a streams member's states from 1 (``STABLE`` = 1, ``UNREVOKED_TASKS`` = 2,
``UNRELEASED_TASKS`` = 3; streams/MemberState.java), where KIP-848's start at 0: a reader
taking 0 for stable would show every streams group ``Reconciling`` whenever the offsets
topic is its only source.

A share group's partitions are shared by design (KIP-932: records of a partition are handed
out per fetch to whichever of its members asks), so its assigned total counts each partition
once however many members hold it, and it has no imbalance ratio: partitions per member say
nothing about a member's load when the partitions are shared (:func:`share_partitions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from decoders.records import SHARE_GROUP_TYPES, Record, RecordType
from streaming.groups.boundary import advance_generation, metadata_arrives
from streaming.groups.model import GroupSnapshot, OtherGroupState, assignment_of, learn_topic
from streaming.protocol import SHARE, STREAMS

_GROUP_EPOCH = (RecordType.SHARE_GROUP_METADATA, RecordType.STREAMS_GROUP_METADATA)
_ASSIGNMENT_EPOCH = (RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                     RecordType.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA)
_MEMBER = (RecordType.SHARE_GROUP_MEMBER_METADATA, RecordType.STREAMS_GROUP_MEMBER_METADATA)
_TARGET = (RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, RecordType.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER)
_CURRENT = (RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, RecordType.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT)
# Records that name topics (share: partition and state-partition metadata; streams: partition metadata).
_TOPIC_NAMES = (RecordType.SHARE_GROUP_PARTITION_METADATA, RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
                RecordType.STREAMS_GROUP_PARTITION_METADATA)

# Kafka's state number for a streams member settled on its target (streams/MemberState.java).
_STREAMS_STABLE = 1


def group_type_of(record_type: int) -> str:
    return SHARE if record_type in SHARE_GROUP_TYPES else STREAMS


def apply_share_streams(snapshot: GroupSnapshot, record: Record, record_time_ms: int) -> None:
    """Fold one share- or streams-group record into ``snapshot``."""
    record_type, key, value = record.record_type, record.key, record.value
    group_type = group_type_of(record_type)
    if value is None:
        _tombstone(snapshot, record, record_time_ms)
        return
    if snapshot.other is None or snapshot.other.group_type != group_type:
        metadata_arrives(snapshot, group_type, record_time_ms)
        snapshot.classic = snapshot.consumer = None
        snapshot.other = OtherGroupState(group_type)
    state = snapshot.other
    if record_type in _GROUP_EPOCH:
        state.group_epoch = int(value.get("epoch") or 0)
        if record_type == RecordType.STREAMS_GROUP_METADATA:
            state.validated_topology_epoch = _validated_topology_epoch(value)
        advance_generation(snapshot, state.group_epoch)
    elif record_type == RecordType.STREAMS_GROUP_TOPOLOGY:
        state.topology_epoch = value.get("epoch")
    elif record_type in _ASSIGNMENT_EPOCH:
        state.assignment_epoch = value.get("assignmentEpoch")
    elif record_type in _MEMBER:
        member = state.member(str(key["memberId"]))
        member.instance_id = value.get("instanceId")
        member.client_id = value.get("clientId") or ""
        member.client_host = value.get("clientHost") or ""
        member.known = True
    elif record_type in _TARGET:
        state.member(str(key["memberId"])).target = _held(value)
    elif record_type in _CURRENT:
        member = state.member(str(key["memberId"]))
        member.member_epoch = value.get("memberEpoch")
        member.state = value.get("state")
        member.assigned = _held(value, "assignedPartitions")
        if group_type == SHARE:
            member.partitions = assignment_of(value.get("assignedPartitions"), "topicId")
    elif record_type in _TOPIC_NAMES:
        for field_name in ("topics", "initializedTopics", "initializingTopics"):
            for topic in value.get(field_name) or ():
                learn_topic(snapshot, topic.get("topicId"), topic.get("topicName"))


def _validated_topology_epoch(value: Mapping[str, Any]) -> int | None:
    """The topology epoch Kafka last validated. The layouts that carry the metadata hash (4.1+) carry it
    as a tagged field, left out while -1 (none validated yet); the development layout before them has
    neither, so there readiness is unknown (None)."""
    if "metadataHash" not in value:
        return None
    return int(value.get("validatedTopologyEpoch", -1))


def _held(value: Mapping[str, Any], share_field: str = "topicPartitions") -> int:
    """Share: partitions held; streams: active tasks held (one per partition of a subtopology)."""
    entries: Iterable[Mapping[str, Any]] = value.get(share_field) or value.get("activeTasks") or ()
    return sum(len(entry.get("partitions") or ()) for entry in entries)


def share_partitions(state: OtherGroupState) -> int:
    """A share group's partitions held by any member, each counted once however many hold it. A member
    restored from a snapshot written before the sets were kept (a count, no set) adds its count, as before,
    until its next current-assignment record."""
    members = [m for m in state.members.values() if m.known]
    held = {(topic, p) for m in members for topic, parts in m.partitions.items() for p in parts}
    return len(held) + sum(m.assigned for m in members if m.assigned and not m.partitions)


def _tombstone(snapshot: GroupSnapshot, record: Record, record_time_ms: int) -> None:
    state = snapshot.other
    if state is None or state.group_type != group_type_of(record.record_type):
        return
    record_type = record.record_type
    if record_type in _GROUP_EPOCH:  # written last when the group is deleted
        snapshot.other = None
        snapshot.deleted_type, snapshot.deleted_ms = state.group_type, record_time_ms
    elif record_type in _ASSIGNMENT_EPOCH:
        state.assignment_epoch = None
    elif record_type == RecordType.STREAMS_GROUP_TOPOLOGY:
        state.topology_epoch = None
    elif record_type in (*_MEMBER, *_TARGET, *_CURRENT):
        member = state.members.get(str(record.key.get("memberId")))
        if member is None:
            return
        if record_type in _MEMBER:  # the member's last tombstone: it left
            del state.members[member.member_id]
        elif record_type in _TARGET:
            member.target = None
        else:
            member.member_epoch, member.state, member.assigned, member.partitions = None, None, 0, {}


def other_state(state: OtherGroupState) -> str:
    """Kafka's state name, derived as its coordinator does, as far as the records tell: ``Empty``
    without members; share groups are otherwise ``Stable``; streams groups ``NotReady`` while
    Kafka has not validated the topology's current epoch against the cluster's topics (a source
    or internal topic missing: no task is assigned; unknown without both epochs: a state restored
    from a snapshot taken before they were kept gets the topology epoch only when the topology
    next changes), ``Assigning`` while the target lags the
    group epoch, ``Reconciling`` while a member is not on the target epoch, not settled or not
    holding its target yet, else ``Stable``."""
    members = [m for m in state.members.values() if m.known]
    if not members:
        return "Empty"
    if state.group_type == SHARE:
        return "Stable"
    if None not in (state.topology_epoch, state.validated_topology_epoch) \
            and state.topology_epoch != state.validated_topology_epoch:
        return "NotReady"
    if state.assignment_epoch is None or (state.group_epoch is not None
                                          and state.assignment_epoch < state.group_epoch):
        return "Assigning"
    if any(m.member_epoch != state.assignment_epoch or m.state not in (None, _STREAMS_STABLE)
           or (m.target is not None and m.assigned != m.target) for m in members):
        return "Reconciling"
    return "Stable"

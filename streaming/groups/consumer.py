"""The KIP-848 consumer protocol's fold: group epoch, member, target and current-assignment records.

Kafka writes a member's three records (subscription 5, target 7, current assignment 8)
and tombstones them independently; the group epoch (3) moves when membership or
subscriptions change, and the target assignment epoch (6) completes an assignment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from sys import intern

from decoders.records import Record, RecordType
from streaming.groups.boundary import (
    KAFKA_DEFAULT_TIMEOUTS,
    CompletedAssignment,
    When,
    advance_generation,
    boundary,
    empty_transition,
    metadata_arrives,
    move_boundary,
)
from streaming.groups.model import (
    Assignment,
    BoundaryMember,
    ConsumerMember,
    ConsumerState,
    CurrentAssignment,
    Departed,
    GroupSnapshot,
    MemberMetadata,
    assignment_of,
    intern_or_none,
    learn_topic,
    owners_of,
)
from streaming.protocol import CONSUMER, GroupTimeouts, RebalanceEvent, TopicPartition

_MEMBER_RECORDS = (RecordType.CONSUMER_GROUP_MEMBER_METADATA, RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                   RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
# ConsumerGroupHeartbeatRequest.LEAVE_GROUP_STATIC_MEMBER_EPOCH: a static member closed (it may come back).
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


def apply_consumer(
    snapshot: GroupSnapshot, record: Record, record_time_ms: int, commits: Mapping[TopicPartition, int] | None,
    timeouts: GroupTimeouts | None = None,
) -> list[RebalanceEvent]:
    """Fold one KIP-848 record; ``timeouts`` are the group's consumer-protocol timeouts in force (the
    records do not carry them; None: the ones last given, else Kafka's defaults)."""
    record_type, key, value = record.record_type, record.key, record.value
    if timeouts is not None and snapshot.consumer is not None:
        snapshot.consumer.session_timeout_ms, snapshot.consumer.heartbeat_interval_ms = timeouts
    if value is None:
        _consumer_tombstone(snapshot, record, record_time_ms)
        return []
    if snapshot.consumer is None:  # new KIP-848 group, or converted from classic
        metadata_arrives(snapshot, CONSUMER, record_time_ms)
        snapshot.classic = None
        snapshot.consumer = ConsumerState()
        if timeouts is not None:
            snapshot.consumer.session_timeout_ms, snapshot.consumer.heartbeat_interval_ms = timeouts
    state = snapshot.consumer
    in_force = timeouts_in_force(state)
    if record_type == RecordType.CONSUMER_GROUP_METADATA:
        _group_epoch(snapshot, state, int(value.get("epoch") or 0), record_time_ms, commits, in_force)
    elif record_type == RecordType.CONSUMER_GROUP_PARTITION_METADATA:
        for topic in value.get("topics") or ():
            learn_topic(snapshot, topic.get("topicId"), topic.get("topicName"))
    elif record_type == RecordType.CONSUMER_GROUP_MEMBER_METADATA:
        classic = value.get("classicMemberMetadata")
        session = classic.get("sessionTimeoutMs") if classic else None
        member = state.member(key["memberId"])
        member.active_ms = max(member.active_ms or record_time_ms, record_time_ms)
        member.metadata = MemberMetadata(
            instance_id=value.get("instanceId"),
            rack_id=value.get("rackId"),
            client_id=intern(value.get("clientId") or ""),
            client_host=intern(value.get("clientHost") or ""),
            subscribed_topic_names=sorted(map(intern, value.get("subscribedTopicNames") or ())),
            subscribed_topic_regex=value.get("subscribedTopicRegex"),
            rebalance_timeout_ms=value.get("rebalanceTimeoutMs"),
            server_assignor=intern_or_none(value.get("serverAssignor")),
            # Absent, the tagged field decodes to Kafka's default (timeout 0).
            classic_session_timeout_ms=session or None,
        )
    elif record_type == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        return _target_epoch(snapshot, state, value.get("assignmentEpoch"), record_time_ms, commits, in_force)
    elif record_type == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        member = state.member(key["memberId"])
        member.target = assignment_of(value.get("topicPartitions"), "topicId")
        _fold_settled_target(snapshot, state, member, in_force)
    elif record_type == RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        member = state.member(key["memberId"])
        member.active_ms = max(member.active_ms or record_time_ms, record_time_ms)
        member.static_leave = value.get("memberEpoch") == LEAVE_GROUP_STATIC_MEMBER_EPOCH
        member.current = CurrentAssignment(
            member_epoch=value.get("memberEpoch"),
            previous_member_epoch=value.get("previousMemberEpoch"),
            state=value.get("state"),
            assigned=assignment_of(value.get("assignedPartitions"), "topicId"),
            pending_revocation=assignment_of(value.get("partitionsPendingRevocation"), "topicId"),
        )
    # Type 16 (resolved regex) only tells that the group exists; subscriptions come from type 5.
    return []


def _group_epoch(
    snapshot: GroupSnapshot,
    state: ConsumerState,
    epoch: int,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
    timeouts: GroupTimeouts,
) -> None:
    """A type 3 value: count the step, note when an assignment became pending, see Empty.

    Kafka removes a leaving KIP-848 member with its tombstones and a group-epoch bump
    in one write, and computes the next target only when a remaining member
    heartbeats. So when the last member leaves there may be no type 6 at all (newer
    brokers write one): the Empty transition is taken here, where both versions agree.
    """
    previous = snapshot.last_generation
    advance_generation(snapshot, epoch)
    if previous is not None and epoch < previous:
        state.assignment_epoch = None
        state.epoch_bumped_ms = None
    state.group_epoch = epoch
    if state.assignment_epoch is not None and epoch > state.assignment_epoch and state.epoch_bumped_ms is None:
        state.epoch_bumped_ms = record_time_ms
    if snapshot.baseline_taken and snapshot.epoch_members and not state.members:
        empty_transition(snapshot, When(record_time_ms, {**state.departed}, None, timeouts), commits)
        snapshot.epoch_protocol = snapshot.epoch_leader = None
        snapshot.epoch_type = CONSUMER
        move_boundary(snapshot, snapshot.epoch_generation or 0, {}, {})
        state.epoch_bumped_ms = None
        state.departed = {}


def _consumer_tombstone(snapshot: GroupSnapshot, record: Record, record_time_ms: int) -> None:
    state = snapshot.consumer
    if state is None:
        return
    record_type = record.record_type
    if record_type == RecordType.CONSUMER_GROUP_METADATA:  # written last when the group is deleted (or converted)
        snapshot.consumer = None
        snapshot.deleted_type, snapshot.deleted_ms = CONSUMER, record_time_ms
    elif record_type == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        state.assignment_epoch = None
    elif record_type in _MEMBER_RECORDS:
        member = state.members.get(str(record.key.get("memberId")))
        if member is None:
            return
        if record_type == RecordType.CONSUMER_GROUP_MEMBER_METADATA:
            state.departed[member.owner] = Departed(record_time_ms, member.member_id, member.active_ms,
                                                    member.static_leave, held_by(member))
            member.metadata = None
        elif record_type == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            member.target = None
        else:
            member.held, member.current = held_by(member), None
        if member.is_empty:
            del state.members[member.member_id]
    # Type 4 tombstones (4.1 retires the record) leave learnt topic names valid; type 16 is not modelled.


def held_by(member: ConsumerMember) -> Assignment | None:
    """The partitions a member holds: its current assignment, pending revocations included (what it
    still consumes and commits until it acknowledges their loss); None without one. The target can
    name partitions another member still holds, whose commits are not this member's."""
    current = member.current
    if current is None:
        return member.held
    topics = sorted(current.assigned.keys() | current.pending_revocation.keys())
    return {t: sorted({*current.assigned.get(t, ()), *current.pending_revocation.get(t, ())}) for t in topics}


def _fold_settled_target(snapshot: GroupSnapshot, state: ConsumerState, member: ConsumerMember,
                         timeouts: GroupTimeouts) -> None:
    """Fold a type 7 written outside an assignment into the current boundary.

    Inside an assignment (group epoch ahead of the target epoch) type 7 records are the
    next target and wait for type 6. Outside one they belong to the current epoch: a
    static member replaced under a new member id, or an older record surviving
    compaction; folding them in keeps the next diff honest.
    """
    if state.assignment_epoch is None or (
        state.group_epoch is not None and state.group_epoch > state.assignment_epoch
    ):
        return
    owners = owners_of([(member.owner, member.target)])
    snapshot.epoch_owners.update(owners)
    snapshot.last_owner.update(owners)
    snapshot.epoch_members.setdefault(member.owner, _consumer_boundary_member(member, timeouts))


def timeouts_in_force(state: ConsumerState) -> GroupTimeouts:
    """The group's timeouts as last given, Kafka's defaults where never given."""
    return GroupTimeouts(state.session_timeout_ms or KAFKA_DEFAULT_TIMEOUTS.session_timeout_ms,
                         state.heartbeat_interval_ms or KAFKA_DEFAULT_TIMEOUTS.heartbeat_interval_ms)


def _consumer_boundary_member(member: ConsumerMember, timeouts: GroupTimeouts) -> BoundaryMember:
    meta = member.metadata
    if meta is None:
        return BoundaryMember(member.member_id)
    subscription = [*meta.subscribed_topic_names]
    if meta.subscribed_topic_regex:
        subscription.append(f"regex:{meta.subscribed_topic_regex}")
    classic = meta.classic_session_timeout_ms
    return BoundaryMember(
        member.member_id, meta.instance_id, meta.client_id, meta.client_host,
        classic or timeouts.session_timeout_ms, meta.rebalance_timeout_ms, subscription,
        consumer_protocol=classic is None,
    )


def _consumer_boundary_members(state: ConsumerState, timeouts: GroupTimeouts) -> dict[str, BoundaryMember]:
    return {m.owner: _consumer_boundary_member(m, timeouts) for m in state.members.values()}


def _target_epoch(
    snapshot: GroupSnapshot,
    state: ConsumerState,
    epoch: int | None,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
    timeouts: GroupTimeouts,
) -> list[RebalanceEvent]:
    state.assignment_epoch = epoch
    if epoch is None:
        return []
    owners = owners_of((m.owner, m.target) for m in state.members.values())
    members = _consumer_boundary_members(state, timeouts)
    bumped = state.epoch_bumped_ms
    duration = record_time_ms - bumped if bumped is not None and record_time_ms >= bumped else None
    at = When(record_time_ms, {**state.departed}, duration, timeouts)
    if state.group_epoch is None or epoch >= state.group_epoch:
        state.epoch_bumped_ms = None
    state.departed = {}
    return boundary(snapshot, CompletedAssignment(epoch, owners, members, preferred_assignor(state), None), at, commits)


def preferred_assignor(state: ConsumerState) -> str | None:
    """The server assignor most members ask for (what Kafka uses); None = group default."""
    requested = Counter(
        m.metadata.server_assignor
        for m in state.members.values()
        if m.metadata is not None and m.metadata.server_assignor
    )
    if not requested:
        return None
    return min(requested, key=lambda name: (-requested[name], name))

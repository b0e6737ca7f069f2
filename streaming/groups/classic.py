"""The classic protocol's fold: one GroupMetadata value (type 2) per completed generation."""

from __future__ import annotations

from collections.abc import Mapping
from sys import intern
from typing import Any

from streaming.groups.boundary import CompletedAssignment, When, advance_generation, boundary, metadata_arrives
from streaming.groups.model import (
    BoundaryMember,
    ClassicMember,
    ClassicState,
    GroupSnapshot,
    assignment_of,
    intern_or_none,
    owners_of,
)
from streaming.protocol import CLASSIC, RebalanceEvent, TopicPartition


def apply_classic(
    snapshot: GroupSnapshot,
    value: Mapping[str, Any] | None,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
) -> list[RebalanceEvent]:
    if value is None:
        if snapshot.classic is not None:
            snapshot.classic = None
            snapshot.deleted_type, snapshot.deleted_ms = CLASSIC, record_time_ms
        return []
    metadata_arrives(snapshot, CLASSIC, record_time_ms)
    snapshot.consumer = None  # converted back from KIP-848 (its tombstones may be compacted away)
    state_ts = value.get("currentStateTimestamp")
    new = ClassicState(
        generation=int(value.get("generation") or 0),
        protocol_type=intern(value.get("protocolType") or ""),
        protocol=intern_or_none(value.get("protocol")),
        leader=value.get("leader"),
        state_timestamp_ms=state_ts if state_ts is not None and state_ts >= 0 else None,
        members=[_classic_member(m) for m in value.get("members") or ()],
    )
    snapshot.classic = new
    advance_generation(snapshot, new.generation)
    owners = owners_of((m.owner, m.assigned) for m in new.members)
    members = {
        m.owner: BoundaryMember(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.session_timeout_ms,
            m.rebalance_timeout_ms, list(m.subscribed_topics),
        )
        for m in new.members
    }
    ts = new.state_timestamp_ms
    when = ts if ts is not None else record_time_ms
    duration = record_time_ms - ts if ts is not None and record_time_ms >= ts else None
    at = When(when, {}, duration)  # removed at the end of the join phase: the boundary's time
    completed = CompletedAssignment(new.generation, owners, members, new.protocol, classic_leader(new))
    return boundary(snapshot, completed, at, commits)


def classic_leader(state: ClassicState) -> str | None:
    """The leader by owner (instance id for a static leader), so restarts don't read as changes."""
    for m in state.members:
        if m.member_id == state.leader:
            return m.owner
    return state.leader


def _classic_member(m: Mapping[str, Any]) -> ClassicMember:
    subscription = m.get("decodedSubscription")
    assignment = m.get("decodedAssignment")
    return ClassicMember(
        member_id=m.get("memberId") or "",
        instance_id=m.get("groupInstanceId"),
        client_id=intern(m.get("clientId") or ""),
        client_host=intern(m.get("clientHost") or ""),
        session_timeout_ms=m.get("sessionTimeout"),
        rebalance_timeout_ms=m.get("rebalanceTimeout"),
        subscribed_topics=sorted(map(intern, subscription.get("topics") or ())) if subscription else [],
        assigned=assignment_of(assignment.get("assignedPartitions") if assignment else None, "topic"),
    )

"""A group's summary for the exporter: its state label, members, churn ranking and counters."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Mapping

from streaming.groups.boundary import CHURN_WINDOW_MS, imbalance_ratio
from streaming.groups.classic import classic_leader
from streaming.groups.config import DEFAULT_ABANDONED_AFTER_S
from streaming.groups.consumer import preferred_assignor
from streaming.groups.model import MEMBER_STATE_STABLE, Assignment, CurrentAssignment, GroupSnapshot, member_keys
from streaming.groups.share_streams import other_state, share_partitions
from streaming.protocol import (
    ABANDONED,
    ACTIVE,
    CONSUMER,
    DURATION_BUCKET_LABELS,
    INACTIVE,
    MEMBER_CHURN_CAP,
    SHARE,
    GroupSummary,
    MemberChurn,
    MemberSummary,
)

DEFAULT_ABANDONED_AFTER_MS = int(DEFAULT_ABANDONED_AFTER_S * 1000)
# Kafka's classic protocol type of consumers (the ones whose assignments name topic partitions).
_CONSUMER_PROTOCOL_TYPE = "consumer"


def group_state(snapshot: GroupSnapshot) -> str:
    """The group's state label, derived from what the records say.

    Classic: records are written only at stable points, so a group with members is
    ``Stable`` and one without is ``Empty``: PreparingRebalance / CompletingRebalance
    never reach the topic, and a classic group stuck mid-rebalance keeps showing
    ``Stable`` with its last generation until the rebalance completes. KIP-848 follows
    Kafka's own derivation: ``Empty`` without members; ``Assigning`` while the target
    assignment epoch is behind the group epoch (or unknown); ``Reconciling`` while any
    member is not settled on its target (member epoch behind the target epoch, member
    state not STABLE, partitions pending revocation, or current assignment ≠ target);
    else ``Stable``. Share and streams groups: :func:`~streaming.groups.share_streams.other_state`.
    """
    if snapshot.other is not None:
        return other_state(snapshot.other)
    if not member_keys(snapshot):
        return "Empty"
    state = snapshot.consumer
    if state is None:
        return "Stable"
    if state.assignment_epoch is None or (
        state.group_epoch is not None and state.assignment_epoch < state.group_epoch
    ):
        return "Assigning"
    for m in state.members.values():
        current = m.current
        if (
            current is None
            or current.state != MEMBER_STATE_STABLE
            or current.member_epoch != state.assignment_epoch
            or current.pending_revocation
            or current.assigned != (m.target or {})
        ):
            return "Reconciling"
    return "Stable"


def rebalance_timeout(snapshot: GroupSnapshot) -> int | None:
    """The longest rebalance timeout among the members' records: how long Kafka waits for members to rejoin."""
    if snapshot.classic is not None:
        timeouts = [m.rebalance_timeout_ms for m in snapshot.classic.members]
    elif snapshot.consumer is not None:
        timeouts = [m.metadata.rebalance_timeout_ms for m in snapshot.consumer.members.values() if m.metadata]
    else:
        timeouts = []
    known = [t for t in timeouts if t is not None and t > 0]
    return max(known) if known else None


def _member_summaries(snapshot: GroupSnapshot) -> list[MemberSummary]:
    if snapshot.classic is not None:
        return [
            MemberSummary(m.owner, m.member_id, m.client_id, m.client_host, _count(m.assigned),
                          m.instance_id, tuple(m.subscribed_topics))
            for m in snapshot.classic.members
        ]
    if snapshot.consumer is not None:
        epoch = snapshot.consumer.assignment_epoch
        return [
            MemberSummary(
                m.owner,
                m.member_id,
                m.metadata.client_id if m.metadata else "",
                m.metadata.client_host if m.metadata else "",
                _count(m.current.assigned) if m.current else 0,
                epoch_lag=_epoch_lag(epoch, m.current),
                unreconciled_partitions=_unreconciled(m.target, m.current),
            )
            for m in snapshot.consumer.members.values()
        ]
    if snapshot.other is not None:
        return [MemberSummary(m.owner, m.member_id, m.client_id, m.client_host, m.assigned, m.instance_id)
                for m in snapshot.other.members.values() if m.known]
    return []


def _count(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


def _epoch_lag(assignment_epoch: int | None, current: CurrentAssignment | None) -> int | None:
    """Target assignments a KIP-848 member has not caught up with: Kafka moves a member to the
    target epoch only once it has revoked what it must give up (None: either epoch unknown).

    A negative member epoch is a sentinel, not an epoch: -2 (LEAVE_GROUP_STATIC_MEMBER_EPOCH) is
    the current-assignment record Kafka writes for a static member that left temporarily (it keeps
    its assignment until it rejoins or its session times out), -1 (LEAVE_GROUP_MEMBER_EPOCH) a
    member leaving. Such a member has no epoch lag (None: its series is left out), neither behind
    by target + 2 nor reconciled (0)."""
    if assignment_epoch is None or current is None or current.member_epoch is None or current.member_epoch < 0:
        return None
    return max(0, assignment_epoch - current.member_epoch)


def _unreconciled(target: Assignment | None, current: CurrentAssignment | None) -> int | None:
    """Partitions a KIP-848 member must still give up (owned, or pending revocation, outside its
    target) or take up (in its target, not yet owned): 0 when it owns exactly its target."""
    if target is None:
        return None
    wanted = _pairs(target)
    owned = _pairs(current.assigned) | _pairs(current.pending_revocation) if current else set()
    return len(wanted ^ owned)


def _pairs(assignment: Assignment) -> set[tuple[str, int]]:
    return {(topic, p) for topic, parts in assignment.items() for p in parts}


def member_churn(snapshot: GroupSnapshot, now_ms: int) -> tuple[MemberChurn, ...]:
    """The clients that joined or left most in the window ending at ``now_ms``.

    Ranked by count, then by the latest time, then by name; at most MEMBER_CHURN_CAP.
    """
    counts: Counter[tuple[str, str]] = Counter()
    latest: dict[tuple[str, str], int] = {}
    for t, client_id, host in snapshot.churn:
        if now_ms - CHURN_WINDOW_MS < t <= now_ms:
            counts[(client_id, host)] += 1
            latest[(client_id, host)] = max(latest.get((client_id, host), t), t)
    ranked = sorted(counts, key=lambda k: (-counts[k], -latest[k], k))
    return tuple(MemberChurn(c, h, counts[(c, h)]) for c, h in ranked[:MEMBER_CHURN_CAP])


def turned_abandoned(summary: GroupSummary, now_ms: int, abandoned_after_ms: int) -> GroupSummary:
    """A group's last summary without members, as :func:`summarize` gives it at ``now_ms`` once
    ``abandoned_after_ms`` ran out with nothing written for it: abandoned, and no member churn left in the
    window when that is shorter than ``abandoned_after_ms`` (every join and leave is before the deadline)."""
    churn = () if abandoned_after_ms >= CHURN_WINDOW_MS else summary.member_churn
    return dataclasses.replace(summary, activity=ABANDONED, as_of_ms=int(now_ms), member_churn=churn)


def activity(member_count: int, last_member_ms: int | None, last_commit_ms: int | None, now_ms: int,
             abandoned_after_ms: int) -> str:
    """The group's :data:`~streaming.protocol.ACTIVITIES` label at ``now_ms``, said once here.

    ``active``: it has members. ``inactive``: none, but it had members or committed within
    ``abandoned_after_ms`` (every consumer crashed, a batch job between runs, a consumer that assigns its
    partitions itself and only commits). ``abandoned``: neither for longer than that (a decommissioned
    service, a renamed group id, a console consumer): Kafka keeps its offsets until
    offsets.retention.minutes expires them, and nobody reads them."""
    if member_count:
        return ACTIVE
    last = max(last_member_ms or 0, last_commit_ms or 0)
    return ABANDONED if now_ms - last > abandoned_after_ms else INACTIVE


def last_member(snapshot: GroupSnapshot) -> int | None:
    """When a group without members last had some, as far as its records tell (None: it has members now,
    or no record says). Classic groups: the state timestamp of the record that emptied the group (Kafka's
    own base for expiring an Empty group's offsets, records of Kafka 2.1+), else that record's time; other
    types: the group's last record, the one that emptied it."""
    if member_keys(snapshot) or not snapshot.has_metadata:
        return None
    classic = snapshot.classic
    if classic is not None and classic.state_timestamp_ms is not None and classic.state_timestamp_ms > 0:
        return classic.state_timestamp_ms
    return snapshot.last_seen_ms or None


def assigned_topics(snapshot: GroupSnapshot) -> tuple[str, ...] | None:
    """The topics the group's members are assigned (KIP-848: also those in a target assignment or pending
    revocation, so a reconciling group keeps them), sorted; None where it is not known: no members, a
    classic group of another protocol type than consumer, share and streams groups, or a KIP-848 topic id
    without a known name."""
    topics: set[str] = set()
    if snapshot.classic is not None:
        if snapshot.classic.protocol_type != _CONSUMER_PROTOCOL_TYPE:
            return None
        for m in snapshot.classic.members:
            topics.update(topic for topic, parts in m.assigned.items() if parts)
    elif snapshot.consumer is not None:
        ids: set[str] = set()
        for cm in snapshot.consumer.members.values():
            for assignment in (cm.target or {}, *((cm.current.assigned, cm.current.pending_revocation)
                                                   if cm.current else ())):
                ids.update(topic for topic, parts in assignment.items() if parts)
        if ids - snapshot.topic_names.keys():
            return None
        topics = {snapshot.topic_names[topic_id] for topic_id in ids}
    return tuple(sorted(topics)) if topics else None


def _cumulative(counts: Mapping[str, int]) -> tuple[int, ...]:
    """Cumulative counts per :data:`DURATION_BUCKET_LABELS` entry; () without observations."""
    if not counts:
        return ()
    return tuple(itertools.accumulate(counts.get(label, 0) for label in DURATION_BUCKET_LABELS))


def summarize(snapshot: GroupSnapshot, now_ms: int, last_commit_ms: int | None = None,
              abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS) -> GroupSummary:
    """The exporter's view of a group, taken at ``now_ms`` (the batch time); ``last_commit_ms`` is the group's
    latest offset commit (the stage keeps it beside the snapshot), what :func:`activity` weighs with its
    members."""
    members = sorted(_member_summaries(snapshot), key=lambda m: (m.member, m.member_id))
    classic, consumer, other = snapshot.classic, snapshot.consumer, snapshot.other
    if other is not None:
        protocol_type, protocol, leader, generation = other.group_type, "", "", other.group_epoch
    elif consumer is not None:
        protocol_type, protocol, leader = CONSUMER, preferred_assignor(consumer) or "", ""
        generation = consumer.group_epoch
    elif classic is not None:
        protocol_type, protocol = classic.protocol_type, classic.protocol or ""
        leader, generation = classic_leader(classic) or "", classic.generation
    else:
        protocol_type, protocol, leader, generation = "", "", "", None
    assigned = sum(m.assigned_partitions for m in members)
    imbalance = imbalance_ratio([m.assigned_partitions for m in members])
    if other is not None and other.group_type == SHARE:  # shared partitions: see streaming.groups.share_streams
        assigned, imbalance = share_partitions(other), None
    emptied_ms = None if members else last_member(snapshot)
    committed_ms = last_commit_ms or None
    return GroupSummary(
        group=snapshot.group,
        group_type=snapshot.group_type,
        protocol_type=protocol_type,
        protocol=protocol,
        leader=leader,
        state=group_state(snapshot),
        generation=generation,
        member_count=len(members),
        assigned_partitions=assigned,
        imbalance_ratio=imbalance,
        rebalances_total=snapshot.rebalances_total,
        partitions_moved_total=snapshot.partitions_moved_total,
        empty_transitions_total=snapshot.empty_transitions_total,
        recreations_total=snapshot.recreations_total,
        generations_advanced_total=snapshot.generations_advanced_total,
        rebalance_causes=dict(sorted(snapshot.rebalance_causes.items())),
        departures=dict(sorted(snapshot.departures.items())),
        member_churn=member_churn(snapshot, int(now_ms)),
        last_rebalance_ms=snapshot.last_rebalance_ms,
        last_seen_ms=snapshot.last_seen_ms,
        as_of_ms=int(now_ms),
        members=tuple(members),
        rebalance_durations=_cumulative(snapshot.rebalance_durations),
        rebalance_duration_sum_ms=snapshot.rebalance_duration_sum_ms,
        rebalance_timeout_ms=rebalance_timeout(snapshot),
        activity=activity(len(members), emptied_ms, committed_ms, int(now_ms), abandoned_after_ms),
        last_member_ms=emptied_ms,
        last_commit_ms=committed_ms,
        assigned_topics=assigned_topics(snapshot) if members else None,
    )

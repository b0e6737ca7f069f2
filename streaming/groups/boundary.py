"""The rebalance definition: boundaries, rebalances, causes, departures, movement, churn.

Boundaries: what the records call a completed assignment
    Classic: every type 2 value (Kafka writes one only when a generation completes: at
    the leader's SyncGroup, or with no members when the group goes Empty, or when a
    static member is replaced in place). KIP-848: a type 6 value (target assignment
    epoch); one coordinator write carries member records (5), the group epoch (3), the
    changed target members (7) and then type 6, so at type 6 the target is complete.

Definition of a rebalance (identical on Kafka 3.9 and 4.x)
    A boundary **with at least one member** whose generation (classic) or target
    assignment epoch (KIP-848) differs from the previous boundary's, once a baseline
    exists. Consequences, each asserted in ``tests/test_state.py``:

    * Baseline: the first boundary with members of a group (or of a re-created group)
      is not a rebalance. 4.x writes a generation-0 record with ``protocolType ""``
      when a classic group is created; it has no members, so it is not a baseline and
      the first real assignment still is one, as on 3.9.
    * Empty transition: a group whose previous boundary had members reaches one without
      members (classic: the Empty record with generation + 1; KIP-848: the last
      member's tombstones and group-epoch bump, with or without a target-assignment
      record, whichever comes first). Counted in ``empty_transitions_total``, not a
      rebalance; nothing "moves to nobody".
    * Members coming back after Empty make one rebalance (cause ``members_joined``);
      ownership history ends at Empty, so their partitions are assigned, not moved.
    * Same generation, different content (a static member replaced under a new member
      id, KIP-848 targets rewritten within an epoch, a protocol conversion carrying the
      generation over): not a rebalance; the boundary is updated in place.
    * Re-creation: a generation or group epoch that goes down (the group was deleted
      and re-created while its tombstone was compacted away), or new metadata after a
      tombstone that was not a protocol conversion (online, or the offline switch:
      see :func:`metadata_arrives`). Counted in ``recreations_total``;
      the next boundary with members is a fresh baseline.
    * ``generations_advanced_total`` is the raw sum of upward steps of the classic
      generation / KIP-848 group epoch (Empty records and merged KIP-848 epoch bumps
      included; not the step from 4.x's generation 0) for whoever wants Kafka's own
      numbers.

Classic groups stuck mid-rebalance
    Kafka writes nothing for PreparingRebalance / CompletingRebalance, so a classic group
    waiting for a slow member to rejoin (up to its max.poll.interval.ms) or for the
    leader's SyncGroup still shows its last generation and ``Stable``; the rebalance is
    seen only when it completes.

Movement rule (see :func:`_rebalance`)
    moved = partitions whose new owner differs from the last owner that held them (a
    partition left unassigned in between, as in cooperative-sticky's two-step rebalance,
    keeps its last owner); a partition never owned before is assigned, not moved.
    revoked/assigned compare each owner's holdings at the two boundaries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from streaming.groups.model import (
    DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS,
    DEFAULT_CONSUMER_SESSION_TIMEOUT_MS,
    BoundaryMember,
    Departed,
    GroupSnapshot,
    referenced_topic_ids,
    subscribed_topics,
)
from streaming.protocol import (
    DURATION_BUCKET_LABELS,
    REBALANCE_DURATION_BUCKETS,
    GroupTimeouts,
    RebalanceEvent,
    TopicPartition,
)

# Member churn: joins and leaves kept for this long (the storm alert looks at 10 minutes;
# an hour shows who kept coming and going) and at most this many per group.
CHURN_WINDOW_MS = 3_600_000
CHURN_LOG_CAP = 256


def imbalance_ratio(partition_counts: Sequence[int]) -> float | None:
    """Busiest member's partitions over the mean per member (idle members count).

    1.0 is perfectly even; None without members; 1.0 with members but no partitions.
    """
    if not partition_counts:
        return None
    total = sum(partition_counts)
    if total == 0:
        return 1.0
    return max(partition_counts) / (total / len(partition_counts))


def _owner_imbalance(owners: Mapping[TopicPartition, str], members: Iterable[str]) -> float | None:
    counts = Counter(owners.values())
    everyone = set(members) | set(counts)
    return imbalance_ratio([counts.get(m, 0) for m in sorted(everyone)])


def _client_label(member: BoundaryMember) -> str:
    """How a member is named for churn: client id and host (stable across restarts)."""
    return f"{member.client_id}@{member.client_host}"


# --------------------------------------------------------------------------- departures


KAFKA_DEFAULT_TIMEOUTS = GroupTimeouts(DEFAULT_CONSUMER_SESSION_TIMEOUT_MS, DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS)
# What a fenced KIP-848 member's gap may fall short of session timeout - heartbeat interval by:
# the latency of its last heartbeat's response and of a commit in flight when it died.
FENCE_SLACK_MS = 1_000


def classify_departure(
    member: BoundaryMember, last_commit_ms: int | None, departed_ms: int
) -> str:
    """How a member of a classic group left, inferred from its last offset commit (one of
    :data:`DEPARTURES`; a classic-protocol member of a KIP-848 group: :func:`classic_member_timeouts`).

    ``gap`` = ``departed_ms`` (when the coordinator removed it: the end of the join phase
    that followed, the earliest time the records give) − ``last_commit_ms`` (the latest commit on a
    partition it owned). A member that stops polling commits nothing for
    max.poll.interval.ms before it is removed (gap ≥ rebalance timeout → ``poll_timeout``);
    a crashed or partitioned one is removed a session timeout after the later of its last
    heartbeat and its last commit (a classic group's commit renews the session: Kafka's
    OffsetMetadataManager reschedules the member's heartbeat), so session timeout ≤ gap →
    ``session_timeout``; a member that closes commits
    and leaves at once (gap < session timeout → ``left_cleanly``). ``unknown`` without
    a commit time (it owned nothing, or commits are not known). This is an inference:
    a manual-commit application committing rarely, or a classic join phase held open by
    a slow member, can shift a member into a longer class.
    """
    if last_commit_ms is None:
        return "unknown"
    gap = departed_ms - last_commit_ms
    if member.rebalance_timeout_ms is not None and gap >= member.rebalance_timeout_ms:
        return "poll_timeout"
    if member.session_timeout_ms is not None and gap >= member.session_timeout_ms:
        return "session_timeout"
    return "left_cleanly"


def fence_threshold_ms(timeouts: GroupTimeouts) -> int:
    """The least time a session-timeout fence leaves between a KIP-848 member's last visible activity
    and its tombstones: session timeout - heartbeat interval - slack (see
    :func:`classify_consumer_departure`); the slack never takes more than half the difference."""
    session, heartbeat = timeouts
    return session - heartbeat - min(FENCE_SLACK_MS, max(0, session - heartbeat) // 2)


def classic_member_timeouts(member: BoundaryMember, group: GroupTimeouts) -> GroupTimeouts:
    """The timeouts that fence a classic-protocol member of a KIP-848 group. Kafka times its session
    with the session timeout of its JoinGroup and renews it on its classic heartbeats only: unlike in a
    classic group, its offset commits do not renew it (OffsetMetadataManager reschedules heartbeats for
    classic groups only), so the KIP-848 rule applies. Kafka does not record the client's heartbeat
    interval: taken as a third of the session timeout, the most Kafka's consumer documentation advises."""
    session = member.session_timeout_ms or group.session_timeout_ms
    return GroupTimeouts(session, session // 3)


def classify_consumer_departure(
    member: BoundaryMember, last_commit_ms: int | None, departed: Departed, timeouts: GroupTimeouts
) -> str:
    """How a member of a KIP-848 group left (one of :data:`DEPARTURES`): one speaking the consumer
    protocol with the group's ``timeouts``, a classic-protocol one with :func:`classic_member_timeouts`.

    Its session is renewed by heartbeats only (an offset commit renews a classic member's session,
    not a KIP-848 one's), and a heartbeat that changes nothing writes nothing. What the records show
    of its last activity: its last commit ``c`` on a partition it held (its current assignment: a
    partition the target gives it stays with its holder until revoked, and the holder's commits on it
    are not its own), and ``r``, the last
    subscription or current-assignment record Kafka wrote for it (only ever while handling its
    own heartbeat). ``T`` is its removal (the subscription tombstone).

    * Fenced (crash, partition): Kafka fences it a session timeout ``S`` after the last heartbeat it
      handled, ``h``. The member heartbeats every interval ``H`` (the next one is sent ``H`` after
      the previous was sent), so it died before ``h + H + d`` (``d``: the response's latency), and
      its last commit was written by then (plus a commit in flight). So ``T - c >= S - H - d`` and
      ``T - r >= T - h = S``: ``T - max(c, r) >= S - H - slack``.
    * Left (``close()``: it commits, then heartbeats epoch -1, and Kafka writes the tombstones while
      handling that heartbeat): ``T - c`` is the time its close took between the two, milliseconds
      unless a revocation callback is slow.

    So: ``session_timeout`` when ``T - max(c, r) >= S - H - slack`` (:func:`fence_threshold_ms`), else
    ``left_cleanly``; ``poll_timeout`` first, as for classic members, when nothing was committed
    for the rebalance timeout (max.poll.interval.ms). A static member whose last current assignment
    carried epoch -2 closed (Kafka keeps it for its session timeout, then removes it): ``left_cleanly``.
    Without a commit the gap from ``r`` alone tells a leave (below the threshold) but not a fence
    from a quiet member's leave: ``unknown``; so is a member without either.
    """
    if departed.static_leave:
        return "left_cleanly"
    at = departed.time_ms
    if last_commit_ms is not None and member.rebalance_timeout_ms is not None \
            and at - last_commit_ms >= member.rebalance_timeout_ms:
        return "poll_timeout"
    seen = [t for t in (last_commit_ms, departed.active_ms) if t is not None]
    if not seen:
        return "unknown"
    if at - max(seen) < fence_threshold_ms(timeouts):
        return "left_cleanly"
    return "session_timeout" if last_commit_ms is not None else "unknown"


def _departure(
    snapshot: GroupSnapshot, owner: str, member: BoundaryMember, at: When, commits: Mapping[TopicPartition, int] | None
) -> str:
    """How the boundary's ``member`` (owner ``owner``) left: by its protocol's rule. A KIP-848 member's
    commits are looked for on the partitions it held when removed (see :class:`Departed`), where known;
    else on those the last boundary's assignment gave it."""
    departed = at.departed.get(owner)
    if at.timeouts is not None:
        held = departed.held if departed is not None else None
        partitions = ([(t, p) for t, parts in held.items() for p in parts] if held is not None
                      else _assigned(snapshot, owner))
        timeouts = at.timeouts if member.consumer_protocol else classic_member_timeouts(member, at.timeouts)
        return classify_consumer_departure(member, _last_commit(snapshot, partitions, commits),
                                           departed or Departed(at.time), timeouts)
    return classify_departure(member, _last_commit(snapshot, _assigned(snapshot, owner), commits),
                              departed.time_ms if departed is not None else at.time)


def _assigned(snapshot: GroupSnapshot, owner: str) -> list[TopicPartition]:
    """The partitions the last boundary gave ``owner``."""
    return [tp for tp, held_by in snapshot.epoch_owners.items() if held_by == owner]


def _last_commit(
    snapshot: GroupSnapshot, partitions: Iterable[TopicPartition], commits: Mapping[TopicPartition, int] | None
) -> int | None:
    """Latest commit time on any of ``partitions`` (found by topic name)."""
    if commits is None:
        return None
    times = [at for topic, p in partitions if (at := commits.get((snapshot.topic_label(topic), p))) is not None]
    return max(times, default=None)


def metadata_arrives(snapshot: GroupSnapshot, group_type: str, record_time_ms: int) -> None:
    """Metadata after a tombstone: a protocol conversion, or a re-created group.

    Kafka's coordinator writes the records of one operation in one append, all with the
    same timestamp. It converts a group two ways, and both write the old protocol's
    tombstones and the new protocol's first records in that one append:

    * online, while the group has members (the last boundary had members): the members
      and the generation are carried over, the boundary is kept;
    * offline, the documented switch (stop every consumer, change ``group.protocol``,
      start them): the first member of the other protocol finds the group empty, and
      Kafka deletes it and creates the new one in the same write (classic → KIP-848:
      the GroupMetadata tombstone, then the new group's member, epoch and assignment
      records; KIP-848 → classic: the target-epoch, (subscription metadata) and
      group-epoch tombstones, then the new classic group's generation-0 record). The new
      group counts its generations from the start again, so the generation history is
      reset; the baseline stays, and its first assignment with members is one rebalance
      with cause ``protocol_converted``.

    A deletion (``kafka-consumer-groups --delete``, offsets expired from an empty group)
    is an append of its own; whatever metadata comes later is a re-creation.
    """
    deleted, snapshot.deleted_type = snapshot.deleted_type, None
    deleted_ms, snapshot.deleted_ms = snapshot.deleted_ms, None
    if deleted is None:
        return
    if deleted != group_type and snapshot.epoch_members:
        return
    if deleted != group_type and deleted_ms == record_time_ms:
        snapshot.last_generation = snapshot.epoch_generation = None
        return
    _recreate(snapshot)


def _recreate(snapshot: GroupSnapshot) -> None:
    """The group was deleted and created again: a fresh baseline, counters kept."""
    snapshot.recreations_total += 1
    snapshot.baseline_taken = False
    snapshot.last_generation = None
    snapshot.epoch_generation = snapshot.epoch_type = snapshot.epoch_protocol = snapshot.epoch_leader = None
    snapshot.epoch_owners = {}
    snapshot.epoch_members = {}
    snapshot.last_owner = {}


def advance_generation(snapshot: GroupSnapshot, generation: int) -> None:
    """Count the raw generation / group-epoch step; a step down is a re-creation.

    Steps from 4.x's generation-0 creation record are not counted, so the total is
    the same on 3.9, whose first value is already generation 1.
    """
    previous = snapshot.last_generation
    if previous is not None and generation < previous:
        _recreate(snapshot)
    elif previous:
        snapshot.generations_advanced_total += generation - previous
    snapshot.last_generation = generation


def move_boundary(
    snapshot: GroupSnapshot,
    generation: int,
    owners: dict[TopicPartition, str],
    members: dict[str, BoundaryMember],
) -> None:
    snapshot.epoch_generation = generation
    snapshot.epoch_owners = owners
    snapshot.epoch_members = members
    snapshot.last_owner.update(owners)
    _prune(snapshot)


@dataclass(frozen=True)
class When:
    """Times of a boundary: the event time, the members removed since the last one (KIP-848: by
    owner, when and how), the measured duration, and a KIP-848 group's timeouts in force (None:
    a classic group)."""

    time: int
    departed: Mapping[str, Departed]
    duration: int | None
    timeouts: GroupTimeouts | None = None


@dataclass(frozen=True)
class CompletedAssignment:
    """A completed assignment, as either protocol's records describe it."""

    generation: int
    owners: dict[TopicPartition, str]
    members: dict[str, BoundaryMember]
    protocol: str | None  # classic: the selected assignor; KIP-848: the server assignor most members ask for
    leader: str | None  # classic only


def boundary(
    snapshot: GroupSnapshot, new: CompletedAssignment, at: When, commits: Mapping[TopicPartition, int] | None
) -> list[RebalanceEvent]:
    """Apply the rebalance definition to a completed assignment (see the module docstring)."""
    if snapshot.baseline_taken and new.generation == snapshot.epoch_generation:
        move_boundary(snapshot, new.generation, new.owners, new.members)  # same generation, rewritten
        return []
    events: list[RebalanceEvent] = []
    if not snapshot.baseline_taken:
        snapshot.baseline_taken = bool(new.members)
    elif not new.members:
        empty_transition(snapshot, at, commits)
    else:
        events.append(_rebalance(snapshot, new, at, commits))
    if new.members or snapshot.epoch_type is None:  # an empty new group of the other protocol is no conversion yet
        snapshot.epoch_type = snapshot.group_type
    snapshot.epoch_protocol, snapshot.epoch_leader = new.protocol, new.leader
    move_boundary(snapshot, new.generation, new.owners, new.members)
    return events


def empty_transition(snapshot: GroupSnapshot, at: When, commits: Mapping[TopicPartition, int] | None) -> None:
    """The last members left: counted apart, departures classified, no event."""
    if not snapshot.epoch_members:
        return
    snapshot.empty_transitions_total += 1
    for owner, member in snapshot.epoch_members.items():
        how = _departure(snapshot, owner, member, at, commits)
        snapshot.departures[how] = snapshot.departures.get(how, 0) + 1
    _record_churn(snapshot, at.time, snapshot.epoch_members.values())


def _rebalance(
    snapshot: GroupSnapshot, new: CompletedAssignment, at: When, commits: Mapping[TopicPartition, int] | None
) -> RebalanceEvent:
    """Diff the new boundary against the previous one and bump the counters."""
    old_owners, old_members, last_owner = snapshot.epoch_owners, snapshot.epoch_members, snapshot.last_owner
    generation, owners, members = new.generation, new.owners, new.members
    moved = sorted(
        (snapshot.topic_label(topic), p)
        for (topic, p), owner in owners.items()
        if (topic, p) in last_owner and last_owner[(topic, p)] != owner
    )
    revoked = sum(1 for tp, owner in old_owners.items() if owners.get(tp) != owner)
    assigned = sum(1 for tp, owner in owners.items() if old_owners.get(tp) != owner)
    back = rejoined(old_members, members, at.departed)
    joined = sorted(set(members) - set(old_members) | back)
    left = sorted(set(old_members) - set(members) | back)
    departures = tuple(_departure(snapshot, o, old_members[o], at, commits) for o in left)
    causes = _causes(snapshot, new, back)
    event = RebalanceEvent(
        group=snapshot.group,
        group_type=snapshot.group_type,
        old_generation=snapshot.epoch_generation if snapshot.epoch_generation is not None else generation,
        new_generation=generation,
        event_time_ms=at.time,
        protocol=new.protocol,
        leader=new.leader,
        leader_changed="leader_changed" in causes,
        members_joined=tuple(joined),
        members_left=tuple(left),
        member_count=len(members),
        partitions_moved=len(moved),
        moved_partitions=tuple(moved),
        partitions_revoked=revoked,
        partitions_assigned=assigned,
        imbalance_before=_owner_imbalance(old_owners, old_members),
        imbalance_after=_owner_imbalance(owners, members),
        causes=causes,
        departures=departures,
        joined_clients=tuple(_client_label(members[o]) for o in joined),
        left_clients=tuple(_client_label(old_members[o]) for o in left),
        duration_ms=at.duration,
    )
    snapshot.rebalances_total += 1
    snapshot.partitions_moved_total += len(moved)
    snapshot.last_rebalance_ms = at.time
    for cause in causes:
        snapshot.rebalance_causes[cause] = snapshot.rebalance_causes.get(cause, 0) + 1
    for how in departures:
        snapshot.departures[how] = snapshot.departures.get(how, 0) + 1
    if at.duration is not None:
        _observe_duration(snapshot, at.duration)
    _record_churn(snapshot, at.time, [members[o] for o in joined] + [old_members[o] for o in left])
    return event


def _observe_duration(snapshot: GroupSnapshot, duration_ms: int) -> None:
    """Count one measured rebalance duration into its histogram bucket (first bound ≥ it)."""
    seconds = duration_ms / 1000
    index = next((i for i, bound in enumerate(REBALANCE_DURATION_BUCKETS) if seconds <= bound),
                 len(REBALANCE_DURATION_BUCKETS))
    label = DURATION_BUCKET_LABELS[index]
    snapshot.rebalance_durations[label] = snapshot.rebalance_durations.get(label, 0) + 1
    snapshot.rebalance_duration_sum_ms += duration_ms


def rejoined(
    old: Mapping[str, BoundaryMember], new: Mapping[str, BoundaryMember], departed: Mapping[str, Departed]
) -> set[str]:
    """Owners in both boundaries that were removed in between and came back under the same member id.

    Since KIP-1082 a KIP-848 client keeps its member id: fenced (FENCED_MEMBER_EPOCH), it rejoins
    with epoch 0 under that id. When it does so before another member's heartbeat recomputes the
    target, Kafka writes its tombstones and group-epoch bump, then its new subscription, a second
    bump and one target: the two boundaries list the same owner, yet it left and joined. (A static
    member replaced in place comes back under a new member id: not this.)
    """
    return {o for o, gone in departed.items()
            if o in old and o in new and gone.member_id and gone.member_id == new[o].member_id}


def _causes(snapshot: GroupSnapshot, new: CompletedAssignment, back: set[str]) -> tuple[str, ...]:
    """Why the group rebalanced, read from the difference with the previous boundary.

    - ``members_joined`` / ``members_left``: an owner (instance id, else member id) is
      in only one of the two boundaries, or left and came back under the same member id
      in between (:func:`rejoined`).
    - ``static_member_replaced``: a static member (same instance id in both) holds a
      different member id: it restarted and took its place back within this rebalance.
    - ``subscription_changed``: a member present in both subscribes to other topics.
    - ``partitions_added``: the assignment holds a partition no member ever held, of a
      topic whose other partitions were held before (partitions were added to a
      subscribed topic; a newly subscribed topic is ``subscription_changed``).
    - ``assignor_changed``: same protocol, another assignor (classic selected protocol;
      KIP-848 the server assignor most members ask for).
    - ``leader_changed``: the classic leader (by owner) differs from the previous one.
    - ``protocol_converted``: the group changed between classic and KIP-848.
    - ``unknown``: none of the above is visible in the records (a client forcing a
      rejoin, a metadata refresh, a KIP-848 epoch bump with no member change).

    After an Empty boundary (no members, assignor or leader) only ``members_joined``
    and ``protocol_converted`` can apply.
    """
    old, owners, members, protocol, leader = snapshot.epoch_members, new.owners, new.members, new.protocol, new.leader
    both = set(members) & set(old)
    held_topics = {topic for topic, _ in snapshot.last_owner}
    converted = snapshot.epoch_type is not None and snapshot.epoch_type != snapshot.group_type
    checks = {
        "members_joined": bool(set(members) - set(old) or back),
        "members_left": bool(set(old) - set(members) or back),
        "static_member_replaced": any(
            members[o].instance_id and members[o].member_id != old[o].member_id for o in both
        ),
        "subscription_changed": any(members[o].subscription != old[o].subscription for o in both),
        "partitions_added": any(tp not in snapshot.last_owner and tp[0] in held_topics for tp in owners),
        "assignor_changed": not converted and bool(protocol and snapshot.epoch_protocol)
        and protocol != snapshot.epoch_protocol,
        "leader_changed": bool(leader and snapshot.epoch_leader) and leader != snapshot.epoch_leader,
        "protocol_converted": converted,
    }
    causes = tuple(sorted(cause for cause, hit in checks.items() if hit))
    return causes or ("unknown",)


def _record_churn(snapshot: GroupSnapshot, time_ms: int, members: Iterable[BoundaryMember]) -> None:
    """Remember who joined or left when, for the churn ranking; bounded in time and size."""
    snapshot.churn.extend((time_ms, m.client_id, m.client_host) for m in members)
    newest = max((t for t, _, _ in snapshot.churn), default=time_ms)
    recent = [entry for entry in snapshot.churn if entry[0] > newest - CHURN_WINDOW_MS]
    snapshot.churn = recent[-CHURN_LOG_CAP:]


def _prune(snapshot: GroupSnapshot) -> None:
    """Keep ``last_owner`` to referenced topics and ``topic_names`` to referenced ids."""
    topics = {topic for topic, _ in snapshot.epoch_owners} | subscribed_topics(snapshot)
    snapshot.last_owner = {tp: owner for tp, owner in snapshot.last_owner.items() if tp[0] in topics}
    if snapshot.topic_names:
        referenced = referenced_topic_ids(snapshot)
        snapshot.topic_names = {t: n for t, n in snapshot.topic_names.items() if t in referenced}

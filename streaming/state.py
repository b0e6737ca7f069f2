"""Per-group state rebuilt from decoded ``__consumer_offsets`` records, as pure functions.

The streaming core keeps one :class:`GroupSnapshot` per group id (persisted as the
string from :meth:`GroupSnapshot.to_json`) and folds the group-metadata records of each
micro-batch into it, in log order, with :func:`apply_record`. Committed offsets are not
kept here: the core keeps them (and counts commits) itself, and drops a group once it
has neither metadata (:attr:`GroupSnapshot.has_metadata`) nor offsets. Nothing here
reads the clock or does I/O: every time is passed in, so a batch replayed from a
checkpoint gives the same snapshots and events.

Ownership model
    A partition's *owner* is the member's static instance id when it has one, else its
    member id, so a static member restarting under a new member id keeps its partitions
    (no movement, not a rebalance). Classic groups key partitions by topic name; KIP-848
    groups by topic id (what their records carry), rendered with a learnt id→name map.

Rebalance boundaries
    Classic: a type 2 value whose generation differs from the previous one. KIP-848: a
    type 6 value (target assignment epoch) that differs from the previous one; one
    coordinator write carries member records (5), the group epoch (3), the changed target
    members (7) and then type 6, so at type 6 the new target is complete and is compared
    with the target of the previous boundary. The first boundary seen for a group (or for
    a group re-created after a tombstone or converted between protocols) is a baseline:
    no event, no counter bump.

Movement rule (see :func:`_transition`)
    moved = partitions whose new owner differs from the last owner that ever held them
    (a partition left unassigned in between, as in cooperative-sticky's two-step
    rebalance, keeps its last owner); a partition never owned before is assigned, not
    moved. revoked/assigned compare each owner's holdings at the two boundaries.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from decoders.records import CONSUMER_GROUP_TYPES, GROUP_METADATA_TYPE, OFFSET_COMMIT_TYPES, Record

CLASSIC = "classic"
CONSUMER = "consumer"

# Kafka's text form of the all-zero uuid: "no topic id" in offset-commit values.
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"

# KIP-848 member states (type 8 ``state``); only STABLE matters for the group state label.
MEMBER_STATE_STABLE = 0

# Bump when the JSON layout changes; from_json refuses layouts it does not know.
SNAPSHOT_FORMAT = 2

TopicPartition = tuple[str, int]
Assignment = dict[str, list[int]]


# --------------------------------------------------------------------------- snapshot


@dataclass
class ClassicMember:
    """One member of a classic group, from the type 2 value's member array."""

    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    subscribed_topics: list[str] = field(default_factory=list)
    assigned: Assignment = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return self.instance_id or self.member_id


@dataclass
class ClassicState:
    """The latest type 2 value of a classic group (written only at stable points)."""

    generation: int
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    state_timestamp_ms: int | None = None
    members: list[ClassicMember] = field(default_factory=list)


@dataclass
class MemberMetadata:
    """A KIP-848 member's subscription record (type 5)."""

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int | None = None
    server_assignor: str | None = None
    classic_protocol: bool = False


@dataclass
class CurrentAssignment:
    """A KIP-848 member's current assignment (type 8); topics by id."""

    member_epoch: int | None = None
    previous_member_epoch: int | None = None
    state: int | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


@dataclass
class ConsumerMember:
    """A KIP-848 member: its three records arrive (and are tombstoned) independently."""

    member_id: str
    metadata: MemberMetadata | None = None
    target: Assignment | None = None
    current: CurrentAssignment | None = None

    @property
    def owner(self) -> str:
        if self.metadata is not None and self.metadata.instance_id:
            return self.metadata.instance_id
        return self.member_id

    @property
    def is_empty(self) -> bool:
        return self.metadata is None and self.target is None and self.current is None


@dataclass
class ConsumerState:
    """A KIP-848 group: group epoch (type 3), target epoch (type 6) and its members."""

    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: dict[str, ConsumerMember] = field(default_factory=dict)

    def member(self, member_id: str) -> ConsumerMember:
        return self.members.setdefault(member_id, ConsumerMember(member_id))


@dataclass
class GroupSnapshot:
    """Everything kept per group between micro-batches.

    At most one of ``classic`` / ``consumer`` is set; neither is set once the group's
    metadata was tombstoned (the core may still hold its committed offsets).
    ``epoch_owners`` / ``epoch_members`` are the ownership and membership at the last
    boundary (baseline or rebalance); ``last_owner`` remembers the last owner of every
    partition of a topic still referenced (held at the last boundary or subscribed),
    including partitions unassigned since; ``topic_names`` keeps only ids still in use.
    """

    group: str
    classic: ClassicState | None = None
    consumer: ConsumerState | None = None
    topic_names: dict[str, str] = field(default_factory=dict)
    rebalances_total: int = 0
    partitions_moved_total: int = 0
    last_rebalance_ms: int | None = None
    epoch_owners: dict[TopicPartition, str] = field(default_factory=dict)
    epoch_members: list[str] = field(default_factory=list)
    last_owner: dict[TopicPartition, str] = field(default_factory=dict)
    last_seen_ms: int = 0

    @property
    def group_type(self) -> str:
        return CONSUMER if self.consumer is not None else CLASSIC

    @property
    def baseline_taken(self) -> bool:
        """True once a boundary has been seen, so the next different one is a rebalance."""
        if self.consumer is not None:
            return self.consumer.assignment_epoch is not None
        return self.classic is not None

    @property
    def has_metadata(self) -> bool:
        """False once the group's metadata was tombstoned (or never seen)."""
        return self.classic is not None or self.consumer is not None

    def topic_label(self, topic: str) -> str:
        """A topic for display: KIP-848 assignments carry ids, shown by name when known."""
        return self.topic_names.get(topic, topic) if self.consumer is not None else topic

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": SNAPSHOT_FORMAT,
            "group": self.group,
            "classic": asdict(self.classic) if self.classic is not None else None,
            "consumer": asdict(self.consumer) if self.consumer is not None else None,
            "topic_names": self.topic_names,
            "rebalances_total": self.rebalances_total,
            "partitions_moved_total": self.partitions_moved_total,
            "last_rebalance_ms": self.last_rebalance_ms,
            "epoch_owners": _owners_to_json(self.epoch_owners),
            "epoch_members": self.epoch_members,
            "last_owner": _owners_to_json(self.last_owner),
            "last_seen_ms": self.last_seen_ms,
        }

    def to_json(self) -> str:
        """Compact, deterministic JSON (one string column in Spark's state store)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupSnapshot:
        if d.get("v") != SNAPSHOT_FORMAT:
            raise ValueError(f"unsupported snapshot format {d.get('v')!r}")
        classic = d.get("classic")
        consumer = d.get("consumer")
        return cls(
            group=d["group"],
            classic=_classic_from_dict(classic) if classic is not None else None,
            consumer=_consumer_from_dict(consumer) if consumer is not None else None,
            topic_names=dict(d.get("topic_names", {})),
            rebalances_total=d.get("rebalances_total", 0),
            partitions_moved_total=d.get("partitions_moved_total", 0),
            last_rebalance_ms=d.get("last_rebalance_ms"),
            epoch_owners=_owners_from_json(d.get("epoch_owners", {})),
            epoch_members=list(d.get("epoch_members", [])),
            last_owner=_owners_from_json(d.get("last_owner", {})),
            last_seen_ms=d.get("last_seen_ms", 0),
        )

    @classmethod
    def from_json(cls, text: str) -> GroupSnapshot:
        return cls.from_dict(json.loads(text))


def _owners_to_json(owners: Mapping[TopicPartition, str]) -> dict[str, dict[str, list[int]]]:
    """owner → topic → partitions: far smaller than one entry per partition."""
    out: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), owner in sorted(owners.items()):
        out.setdefault(owner, {}).setdefault(topic, []).append(partition)
    return out


def _owners_from_json(d: Mapping[str, Mapping[str, list[int]]]) -> dict[TopicPartition, str]:
    return {
        (topic, p): owner for owner, topics in d.items() for topic, parts in topics.items() for p in parts
    }


def _classic_from_dict(d: Mapping[str, Any]) -> ClassicState:
    return ClassicState(**{**d, "members": [ClassicMember(**m) for m in d["members"]]})


def _consumer_from_dict(d: Mapping[str, Any]) -> ConsumerState:
    members = {}
    for member_id, m in d["members"].items():
        members[member_id] = ConsumerMember(
            member_id=m["member_id"],
            metadata=MemberMetadata(**m["metadata"]) if m["metadata"] is not None else None,
            target=m["target"],
            current=CurrentAssignment(**m["current"]) if m["current"] is not None else None,
        )
    return ConsumerState(d["group_epoch"], d["assignment_epoch"], members)


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class RebalanceEvent:
    """One generation (classic) or target-assignment epoch (KIP-848) change.

    Members are named by owner (instance id for static members, else member id);
    ``moved_partitions`` holds ``"topic:partition"`` strings (KIP-848 topics by name
    when the id→name map knows them, else by id). List fields are tuples here and
    list<string> columns in Parquet (see :mod:`streaming.history`).
    """

    group: str
    group_type: str
    old_generation: int
    new_generation: int
    event_time_ms: int
    protocol: str | None
    leader: str | None
    leader_changed: bool
    members_joined: tuple[str, ...]
    members_left: tuple[str, ...]
    member_count: int
    partitions_moved: int
    moved_partitions: tuple[str, ...]
    partitions_revoked: int
    partitions_assigned: int
    imbalance_before: float | None
    imbalance_after: float | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("members_joined", "members_left", "moved_partitions"):
            d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RebalanceEvent:
        values = {name: d[name] for name in cls.__dataclass_fields__}
        for name in ("members_joined", "members_left", "moved_partitions"):
            values[name] = tuple(values[name] or ())
        return cls(**values)


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


# --------------------------------------------------------------------------- record folding


def apply_record(
    snapshot: GroupSnapshot | None, record: Record, record_time_ms: int
) -> tuple[GroupSnapshot | None, list[RebalanceEvent]]:
    """Fold one group record (type 2, or KIP-848 types 3–8 and 16) into ``snapshot``.

    Takes ownership of ``snapshot`` and updates it in place (copying a large group per
    record would make a batch quadratic); use the returned value. A tombstone clears
    the metadata it deletes and returns the snapshot (counters kept): whether the group
    is gone is the caller's call (no :attr:`~GroupSnapshot.has_metadata` and no
    offsets). Tombstones for state that is not there are ignored and never create a
    group (None in, None out). Share- and streams-group records (types 9–15, 17–23)
    are not modelled and leave the snapshot as it is. Offset commits (types 0/1) are
    the caller's and rejected here.
    """
    record_type = record.record_type
    if record_type in OFFSET_COMMIT_TYPES:
        raise ValueError("offset commits are kept by the caller, not folded here")
    if record_type != GROUP_METADATA_TYPE and record_type not in CONSUMER_GROUP_TYPES:
        return snapshot, []
    if snapshot is None:
        if record.value is None:
            return None, []
        snapshot = GroupSnapshot(group=record.group)
    record_time_ms = int(record_time_ms)
    snapshot.last_seen_ms = max(snapshot.last_seen_ms, record_time_ms)
    if record_type == GROUP_METADATA_TYPE:
        events = _apply_classic(snapshot, record.value, record_time_ms)
    else:
        events = _apply_consumer(snapshot, record, record_time_ms)
    return snapshot, events


def drop_expired(snapshot: GroupSnapshot, now_ms: int, ttl_ms: int) -> bool:
    """True when the group has been silent for longer than ``ttl_ms`` and has no members.

    Groups with members are kept however quiet they are: a live group only changes
    through records, and dropping it would hide a stable group's metrics.
    """
    return now_ms - snapshot.last_seen_ms > ttl_ms and not _member_keys(snapshot)


def learn_topic_names(snapshot: GroupSnapshot, names: Mapping[str, str]) -> None:
    """Teach a KIP-848 group topic id → name pairs learnt elsewhere (e.g. offset commits).

    Only ids the group currently references are kept, so the map stays bounded.
    """
    if snapshot.consumer is None:
        return
    referenced = _referenced_topic_ids(snapshot)
    for topic_id, name in names.items():
        if topic_id in referenced:
            _learn_topic(snapshot, topic_id, name)


def _learn_topic(snapshot: GroupSnapshot, topic_id: str | None, name: str | None) -> None:
    if topic_id and topic_id != ZERO_TOPIC_ID and name:
        snapshot.topic_names[topic_id] = name


def _reset_movement(snapshot: GroupSnapshot) -> None:
    """Forget ownership history: the group was deleted or changed protocol."""
    snapshot.epoch_owners = {}
    snapshot.epoch_members = []
    snapshot.last_owner = {}


def _set_boundary(snapshot: GroupSnapshot, owners: dict[TopicPartition, str], members: list[str]) -> None:
    snapshot.epoch_owners = owners
    snapshot.epoch_members = members
    snapshot.last_owner.update(owners)
    _prune(snapshot)


def _prune(snapshot: GroupSnapshot) -> None:
    """Keep ``last_owner`` to referenced topics and ``topic_names`` to referenced ids."""
    topics = {topic for topic, _ in snapshot.epoch_owners} | _subscribed_topics(snapshot)
    snapshot.last_owner = {tp: owner for tp, owner in snapshot.last_owner.items() if tp[0] in topics}
    if snapshot.topic_names:
        referenced = _referenced_topic_ids(snapshot)
        snapshot.topic_names = {t: n for t, n in snapshot.topic_names.items() if t in referenced}


def _subscribed_topics(snapshot: GroupSnapshot) -> set[str]:
    """Topics (classic: names; KIP-848: ids, through the name map) the members subscribe to."""
    if snapshot.classic is not None:
        return {t for m in snapshot.classic.members for t in m.subscribed_topics}
    if snapshot.consumer is None:
        return set()
    names = {
        t for m in snapshot.consumer.members.values() if m.metadata for t in m.metadata.subscribed_topic_names
    }
    return {topic_id for topic_id, name in snapshot.topic_names.items() if name in names}


def _referenced_topic_ids(snapshot: GroupSnapshot) -> set[str]:
    """KIP-848 topic ids in any member's records, the last boundary or the ownership history."""
    state = snapshot.consumer
    if state is None:
        return set()
    ids = {topic for topic, _ in snapshot.last_owner} | {topic for topic, _ in snapshot.epoch_owners}
    for m in state.members.values():
        ids.update(m.target or ())
        if m.current is not None:
            ids.update(m.current.assigned)
            ids.update(m.current.pending_revocation)
    return ids


def _assignment(entries: Iterable[Mapping[str, Any]] | None, topic_field: str) -> Assignment:
    """Topic → sorted partitions, merging duplicate topic entries, dropping empty ones."""
    merged: dict[str, set[int]] = {}
    for entry in entries or ():
        topic = entry.get(topic_field)
        partitions = entry.get("partitions") or ()
        if topic is not None and partitions:
            merged.setdefault(topic, set()).update(int(p) for p in partitions)
    return {topic: sorted(parts) for topic, parts in sorted(merged.items())}


def _owners(holdings: Iterable[tuple[str, Assignment | None]]) -> dict[TopicPartition, str]:
    return {
        (topic, p): owner
        for owner, assignment in holdings
        for topic, parts in (assignment or {}).items()
        for p in parts
    }


def _transition(
    snapshot: GroupSnapshot,
    old_generation: int,
    new_generation: int,
    event_time_ms: int,
    owners: dict[TopicPartition, str],
    members: list[str],
    protocol: str | None,
    leader: str | None,
    leader_changed: bool,
) -> RebalanceEvent:
    """Diff the new boundary against the previous one, bump the counters, move the boundary."""
    old_owners, old_members, last_owner = snapshot.epoch_owners, snapshot.epoch_members, snapshot.last_owner
    moved = sorted(
        (snapshot.topic_label(topic), p)
        for (topic, p), owner in owners.items()
        if (topic, p) in last_owner and last_owner[(topic, p)] != owner
    )
    revoked = sum(1 for tp, owner in old_owners.items() if owners.get(tp) != owner)
    assigned = sum(1 for tp, owner in owners.items() if old_owners.get(tp) != owner)
    event = RebalanceEvent(
        group=snapshot.group,
        group_type=snapshot.group_type,
        old_generation=old_generation,
        new_generation=new_generation,
        event_time_ms=event_time_ms,
        protocol=protocol,
        leader=leader,
        leader_changed=leader_changed,
        members_joined=tuple(sorted(set(members) - set(old_members))),
        members_left=tuple(sorted(set(old_members) - set(members))),
        member_count=len(members),
        partitions_moved=len(moved),
        moved_partitions=tuple(f"{topic}:{p}" for topic, p in moved),
        partitions_revoked=revoked,
        partitions_assigned=assigned,
        imbalance_before=_owner_imbalance(old_owners, old_members),
        imbalance_after=_owner_imbalance(owners, members),
    )
    snapshot.rebalances_total += 1
    snapshot.partitions_moved_total += len(moved)
    snapshot.last_rebalance_ms = event_time_ms
    _set_boundary(snapshot, owners, members)
    return event


def _apply_classic(
    snapshot: GroupSnapshot, value: Mapping[str, Any] | None, record_time_ms: int
) -> list[RebalanceEvent]:
    if value is None:
        if snapshot.classic is not None:
            snapshot.classic = None
            _reset_movement(snapshot)
        return []
    if snapshot.consumer is not None:  # converted back from KIP-848: a new baseline
        snapshot.consumer = None
        _reset_movement(snapshot)
    state_ts = value.get("currentStateTimestamp")
    new = ClassicState(
        generation=int(value.get("generation") or 0),
        protocol_type=value.get("protocolType") or "",
        protocol=value.get("protocol"),
        leader=value.get("leader"),
        state_timestamp_ms=state_ts if state_ts is not None and state_ts >= 0 else None,
        members=[_classic_member(m) for m in value.get("members") or ()],
    )
    old, snapshot.classic = snapshot.classic, new
    owners = _owners((m.owner, m.assigned) for m in new.members)
    members = [m.owner for m in new.members]
    if old is None or old.generation == new.generation:
        # Baseline, or a same-generation rewrite (a static member replaced under a new
        # member id keeps its generation and partitions): no rebalance.
        _set_boundary(snapshot, owners, members)
        return []
    new_leader = _classic_leader(new)
    return [
        _transition(
            snapshot,
            old.generation,
            new.generation,
            new.state_timestamp_ms if new.state_timestamp_ms is not None else record_time_ms,
            owners,
            members,
            protocol=new.protocol,
            leader=new_leader,
            leader_changed=_classic_leader(old) != new_leader,
        )
    ]


def _classic_leader(state: ClassicState) -> str | None:
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
        client_id=m.get("clientId") or "",
        client_host=m.get("clientHost") or "",
        session_timeout_ms=m.get("sessionTimeout"),
        rebalance_timeout_ms=m.get("rebalanceTimeout"),
        subscribed_topics=sorted(subscription.get("topics") or ()) if subscription else [],
        assigned=_assignment(assignment.get("assignedPartitions") if assignment else None, "topic"),
    )


def _apply_consumer(snapshot: GroupSnapshot, record: Record, record_time_ms: int) -> list[RebalanceEvent]:
    record_type, key, value = record.record_type, record.key, record.value
    if value is None:
        _consumer_tombstone(snapshot, record)
        return []
    if snapshot.consumer is None:  # new KIP-848 group, or converted from classic
        snapshot.classic = None
        _reset_movement(snapshot)
        snapshot.consumer = ConsumerState()
    state = snapshot.consumer
    if record_type == 3:
        state.group_epoch = value.get("epoch")
    elif record_type == 4:
        for topic in value.get("topics") or ():
            _learn_topic(snapshot, topic.get("topicId"), topic.get("topicName"))
    elif record_type == 5:
        state.member(key["memberId"]).metadata = MemberMetadata(
            instance_id=value.get("instanceId"),
            rack_id=value.get("rackId"),
            client_id=value.get("clientId") or "",
            client_host=value.get("clientHost") or "",
            subscribed_topic_names=sorted(value.get("subscribedTopicNames") or ()),
            subscribed_topic_regex=value.get("subscribedTopicRegex"),
            rebalance_timeout_ms=value.get("rebalanceTimeoutMs"),
            server_assignor=value.get("serverAssignor"),
            classic_protocol=value.get("classicMemberMetadata") is not None,
        )
    elif record_type == 6:
        return _target_epoch(snapshot, state, value.get("assignmentEpoch"), record_time_ms)
    elif record_type == 7:
        member = state.member(key["memberId"])
        member.target = _assignment(value.get("topicPartitions"), "topicId")
        _fold_settled_target(snapshot, state, member)
    elif record_type == 8:
        state.member(key["memberId"]).current = CurrentAssignment(
            member_epoch=value.get("memberEpoch"),
            previous_member_epoch=value.get("previousMemberEpoch"),
            state=value.get("state"),
            assigned=_assignment(value.get("assignedPartitions"), "topicId"),
            pending_revocation=_assignment(value.get("partitionsPendingRevocation"), "topicId"),
        )
    # Type 16 (resolved regex) only tells that the group exists; subscriptions come from type 5.
    return []


def _consumer_tombstone(snapshot: GroupSnapshot, record: Record) -> None:
    state = snapshot.consumer
    if state is None:
        return
    record_type = record.record_type
    if record_type == 3:  # written last when a consumer group is deleted (or converted)
        snapshot.consumer = None
        _reset_movement(snapshot)
    elif record_type == 6:
        state.assignment_epoch = None
    elif record_type in (5, 7, 8):
        member = state.members.get(record.key.get("memberId"))
        if member is None:
            return
        if record_type == 5:
            member.metadata = None
        elif record_type == 7:
            member.target = None
        else:
            member.current = None
        if member.is_empty:
            del state.members[member.member_id]
    # Type 4 tombstones (4.1 retires the record) leave learnt topic names valid; type 16 is not modelled.


def _fold_settled_target(snapshot: GroupSnapshot, state: ConsumerState, member: ConsumerMember) -> None:
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
    owners = _owners([(member.owner, member.target)])
    snapshot.epoch_owners.update(owners)
    snapshot.last_owner.update(owners)
    if member.owner not in snapshot.epoch_members:
        snapshot.epoch_members = [*snapshot.epoch_members, member.owner]


def _target_epoch(
    snapshot: GroupSnapshot, state: ConsumerState, epoch: int | None, record_time_ms: int
) -> list[RebalanceEvent]:
    old, state.assignment_epoch = state.assignment_epoch, epoch
    owners = _owners((m.owner, m.target) for m in state.members.values())
    members = [m.owner for m in state.members.values()]
    if old is None or epoch is None or old == epoch:
        _set_boundary(snapshot, owners, members)
        return []
    return [
        _transition(
            snapshot,
            old,
            epoch,
            record_time_ms,
            owners,
            members,
            protocol=_preferred_assignor(state),
            leader=None,
            leader_changed=False,
        )
    ]


def _preferred_assignor(state: ConsumerState) -> str | None:
    """The server assignor most members ask for (what Kafka uses); None = group default."""
    requested = Counter(
        m.metadata.server_assignor
        for m in state.members.values()
        if m.metadata is not None and m.metadata.server_assignor
    )
    if not requested:
        return None
    return min(requested, key=lambda name: (-requested[name], name))


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class MemberSummary:
    """One member as the exporter labels it (``member`` = owner key, stable across restarts)."""

    member: str
    member_id: str
    client_id: str
    client_host: str
    assigned_partitions: int


@dataclass(frozen=True)
class GroupSummary:
    """What the exporter shows for one group; counters are absolute (survive restarts).

    ``generation`` is the classic generation or the KIP-848 group epoch (None when not
    known yet); ``protocol`` is the classic assignor or the KIP-848 preferred server
    assignor ("" when none); ``leader`` is the classic leader's owner key ("" for
    KIP-848); ``state`` is :func:`group_state`'s label.
    """

    group: str
    group_type: str
    protocol_type: str
    protocol: str
    leader: str
    state: str
    generation: int | None
    member_count: int
    assigned_partitions: int
    imbalance_ratio: float | None
    rebalances_total: int
    partitions_moved_total: int
    last_rebalance_ms: int | None
    last_seen_ms: int
    as_of_ms: int
    members: tuple[MemberSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupSummary:
        values = dict(d)
        values["members"] = tuple(MemberSummary(**m) for m in d["members"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> GroupSummary:
        return cls.from_dict(json.loads(text))


def group_state(snapshot: GroupSnapshot) -> str:
    """The group's state label, derived from what the records say.

    Classic: records are written only at stable points, so a group with members is
    ``Stable`` and one without is ``Empty`` (the transient PreparingRebalance /
    CompletingRebalance states never reach the topic). KIP-848 follows Kafka's own
    derivation: ``Empty`` without members; ``Assigning`` while the target assignment
    epoch is behind the group epoch (or unknown); ``Reconciling`` while any member is
    not settled on its target (member epoch behind the target epoch, member state not
    STABLE, partitions pending revocation, or current assignment ≠ target); else
    ``Stable``.
    """
    if not _member_keys(snapshot):
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


def _member_keys(snapshot: GroupSnapshot) -> list[str]:
    if snapshot.classic is not None:
        return [m.owner for m in snapshot.classic.members]
    if snapshot.consumer is not None:
        return [m.owner for m in snapshot.consumer.members.values()]
    return []


def _member_summaries(snapshot: GroupSnapshot) -> list[MemberSummary]:
    if snapshot.classic is not None:
        return [
            MemberSummary(m.owner, m.member_id, m.client_id, m.client_host, _count(m.assigned))
            for m in snapshot.classic.members
        ]
    if snapshot.consumer is not None:
        return [
            MemberSummary(
                m.owner,
                m.member_id,
                m.metadata.client_id if m.metadata else "",
                m.metadata.client_host if m.metadata else "",
                _count(m.current.assigned) if m.current else 0,
            )
            for m in snapshot.consumer.members.values()
        ]
    return []


def _count(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


def summarize(snapshot: GroupSnapshot, now_ms: int) -> GroupSummary:
    """The exporter's view of a group, taken at ``now_ms`` (the batch time)."""
    members = sorted(_member_summaries(snapshot), key=lambda m: (m.member, m.member_id))
    classic, consumer = snapshot.classic, snapshot.consumer
    if consumer is not None:
        protocol_type, protocol, leader = CONSUMER, _preferred_assignor(consumer) or "", ""
        generation = consumer.group_epoch
    elif classic is not None:
        protocol_type, protocol = classic.protocol_type, classic.protocol or ""
        leader, generation = _classic_leader(classic) or "", classic.generation
    else:
        protocol_type, protocol, leader, generation = "", "", "", None
    return GroupSummary(
        group=snapshot.group,
        group_type=snapshot.group_type,
        protocol_type=protocol_type,
        protocol=protocol,
        leader=leader,
        state=group_state(snapshot),
        generation=generation,
        member_count=len(members),
        assigned_partitions=sum(m.assigned_partitions for m in members),
        imbalance_ratio=imbalance_ratio([m.assigned_partitions for m in members]),
        rebalances_total=snapshot.rebalances_total,
        partitions_moved_total=snapshot.partitions_moved_total,
        last_rebalance_ms=snapshot.last_rebalance_ms,
        last_seen_ms=snapshot.last_seen_ms,
        as_of_ms=int(now_ms),
        members=tuple(members),
    )

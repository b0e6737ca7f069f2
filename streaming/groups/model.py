"""What the group stage keeps per group between batches: :class:`GroupSnapshot` and its JSON form.

The stage keeps one snapshot per group id (persisted as :meth:`GroupSnapshot.to_json`) and
folds each batch's group records into it (:mod:`streaming.groups.fold`). Committed offsets
are not kept here: the stage keeps them (and counts commits) itself, and drops a group
once it has neither metadata (:attr:`GroupSnapshot.has_metadata`) nor offsets.

Ownership model
    A partition's *owner* is the member's static instance id when it has one, else its
    member id, so a static member restarting under a new member id keeps its partitions
    (no movement, not a rebalance). Classic groups key partitions by topic name; KIP-848
    groups by topic id (what their records carry), rendered with a learnt id→name map.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from decoders.schemas import ZERO_UUID
from streaming.protocol import CLASSIC, CONSUMER, TopicPartition

# KIP-848 member states (type 8 ``state``); only STABLE matters for the group state label.
MEMBER_STATE_STABLE = 0

# Bump when the JSON layout changes; from_json refuses layouts it does not know.
# Format 3 (before rebalance durations) is still read: its groups start with an empty histogram.
# Format 4 (before KIP-848 departures kept the member id and its last activity, and the group's
# timeouts in force) is still read: its pending departures have neither. Format 5 (before a departing
# KIP-848 member's held partitions were kept) is still read: its pending departures have none.
SNAPSHOT_FORMAT = 6
_READABLE_FORMATS = (3, 4, 5, SNAPSHOT_FORMAT)

# Kafka's defaults for group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms:
# KIP-848 records carry no session timeout for members speaking the consumer protocol (the
# group's config, else the brokers', decides it).
DEFAULT_CONSUMER_SESSION_TIMEOUT_MS = 45_000
DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS = 5_000

Assignment = dict[str, list[int]]


@dataclass
class MemberIdentity:
    """Who a member is and the timeouts it joined with: what a classic member and a boundary's member share."""

    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None

    @property
    def owner(self) -> str:
        """The key its partitions are owned under: a static member's instance id outlives its member ids."""
        return self.instance_id or self.member_id


@dataclass
class ClassicMember(MemberIdentity):
    """One member of a classic group, from the type 2 value's member array."""

    subscribed_topics: list[str] = field(default_factory=list)
    assigned: Assignment = field(default_factory=dict)


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
    """A KIP-848 member's subscription record (type 5).

    ``classic_session_timeout_ms`` is set for members still speaking the classic
    protocol (their session timeout travels in the record); None otherwise.
    """

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int | None = None
    server_assignor: str | None = None
    classic_session_timeout_ms: int | None = None


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
    """A KIP-848 member: its three records arrive (and are tombstoned) independently.

    ``active_ms`` is the time of the latest subscription (5) or current-assignment (8) record
    written for it: Kafka writes those only while handling the member's own heartbeat, so its
    last heartbeat came no earlier. ``static_leave``: its latest current assignment carried
    epoch -2 (a static member that closed; Kafka keeps it until its session times out). ``held``:
    what its current assignment gave it when that was tombstoned, kept until its subscription's
    tombstone (the same write) records its departure.
    """

    member_id: str
    metadata: MemberMetadata | None = None
    target: Assignment | None = None
    current: CurrentAssignment | None = None
    active_ms: int | None = None
    static_leave: bool = False
    held: Assignment | None = None

    @property
    def owner(self) -> str:
        if self.metadata is not None and self.metadata.instance_id:
            return self.metadata.instance_id
        return self.member_id

    @property
    def is_empty(self) -> bool:
        return self.metadata is None and self.target is None and self.current is None


@dataclass
class Departed:
    """A KIP-848 member removed since the last boundary: when (its subscription tombstone), under
    which member id, its last activity the records show, whether it had left as a static member, and
    the partitions it held (its last current assignment, pending revocations included; None: not known)."""

    time_ms: int
    member_id: str = ""
    active_ms: int | None = None
    static_leave: bool = False
    held: Assignment | None = None


@dataclass
class ConsumerState:
    """A KIP-848 group: group epoch (type 3), target epoch (type 6) and its members.

    ``epoch_bumped_ms`` is when the group epoch first moved ahead of the target epoch
    (the start of the pending assignment); ``departed`` each member that left since the
    last boundary, by owner. ``session_timeout_ms`` / ``heartbeat_interval_ms`` are the
    group's consumer-protocol timeouts in force when its records were last folded (its
    group config, else the brokers'; None: not known, Kafka's defaults apply).
    """

    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    epoch_bumped_ms: int | None = None
    departed: dict[str, Departed] = field(default_factory=dict)
    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None

    def member(self, member_id: str) -> ConsumerMember:
        return self.members.setdefault(member_id, ConsumerMember(member_id))


@dataclass
class BoundaryMember(MemberIdentity):
    """What a boundary remembers of each member: enough to explain its departure later.

    ``subscription`` is the sorted subscribed topic names (a KIP-848 regex as
    ``"regex:<pattern>"``). ``consumer_protocol``: a KIP-848 member speaking the consumer
    protocol, whose session only heartbeats renew (not offset commits, as in classic groups).
    """

    subscription: list[str] = field(default_factory=list)
    consumer_protocol: bool = False


@dataclass
class GroupSnapshot:
    """Everything kept per group between micro-batches.

    At most one of ``classic`` / ``consumer`` is set; neither is set once the group's
    metadata was tombstoned (the core may still hold its committed offsets;
    ``deleted_type`` says which protocol was deleted, and ``deleted_ms`` the time of
    its tombstone, until new metadata tells a conversion from a re-creation). The
    ``epoch_*`` fields describe the last boundary (see the module docstring): its
    generation / target epoch, group type (of the last boundary with members), assignor,
    leader, ownership and members. ``last_owner`` remembers the last owner of every
    partition of a topic still referenced (held at the last boundary or subscribed),
    including partitions unassigned since; ``topic_names`` keeps only ids still in use.
    ``last_generation`` is the latest classic generation / KIP-848 group epoch seen.
    ``churn`` holds recent ``(time_ms, client_id, client_host)`` joins and leaves.
    ``rebalance_durations`` counts measured rebalance durations by the label of their
    bucket in :data:`DURATION_BUCKET_LABELS` (sparse, not cumulative) and
    ``rebalance_duration_sum_ms`` sums them (see :class:`RebalanceEvent`'s ``duration_ms``).
    """

    group: str
    classic: ClassicState | None = None
    consumer: ConsumerState | None = None
    other: OtherGroupState | None = None  # a share (KIP-932) or streams (KIP-1071) group
    topic_names: dict[str, str] = field(default_factory=dict)
    rebalances_total: int = 0
    partitions_moved_total: int = 0
    empty_transitions_total: int = 0
    recreations_total: int = 0
    generations_advanced_total: int = 0
    rebalance_causes: dict[str, int] = field(default_factory=dict)
    departures: dict[str, int] = field(default_factory=dict)
    last_rebalance_ms: int | None = None
    baseline_taken: bool = False
    deleted_type: str | None = None
    deleted_ms: int | None = None
    last_generation: int | None = None
    epoch_generation: int | None = None
    epoch_type: str | None = None
    epoch_protocol: str | None = None
    epoch_leader: str | None = None
    epoch_owners: dict[TopicPartition, str] = field(default_factory=dict)
    epoch_members: dict[str, BoundaryMember] = field(default_factory=dict)
    last_owner: dict[TopicPartition, str] = field(default_factory=dict)
    churn: list[tuple[int, str, str]] = field(default_factory=list)
    last_seen_ms: int = 0
    rebalance_durations: dict[str, int] = field(default_factory=dict)
    rebalance_duration_sum_ms: int = 0

    @property
    def group_type(self) -> str:
        if self.other is not None:
            return self.other.group_type
        return CONSUMER if self.consumer is not None else CLASSIC

    @property
    def has_metadata(self) -> bool:
        """False once the group's metadata was tombstoned (or never seen)."""
        return self.classic is not None or self.consumer is not None or self.other is not None

    def topic_label(self, topic: str) -> str:
        """A topic for display: KIP-848 assignments carry ids, shown by name when known."""
        return self.topic_names.get(topic, topic)

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _PLAIN_FIELDS}
        d.update(
            v=SNAPSHOT_FORMAT,
            classic=plain(self.classic) if self.classic is not None else None,
            consumer=_consumer_to_dict(self.consumer) if self.consumer is not None else None,
            epoch_owners=_owners_to_json(self.epoch_owners),
            epoch_members={owner: plain(m) for owner, m in self.epoch_members.items()},
            last_owner=_owners_to_json(self.last_owner),
            churn=[list(entry) for entry in self.churn],
        )
        if self.rebalance_durations:  # most groups never had a measured rebalance: no bytes for them
            d.update(rebalance_durations=self.rebalance_durations,
                     rebalance_duration_sum_ms=self.rebalance_duration_sum_ms)
        if self.deleted_ms is not None:  # only between a tombstone and the metadata after it
            d["deleted_ms"] = self.deleted_ms
        if self.other is not None:
            d["other"] = plain(self.other)
        return d

    def to_json(self) -> str:
        """Compact, deterministic JSON (one string per group in the core's state)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupSnapshot:
        if d.get("v") not in _READABLE_FORMATS:
            raise ValueError(f"unsupported snapshot format {d.get('v')!r}")
        classic, consumer = d["classic"], d["consumer"]
        durations = d.get("rebalance_durations")
        return cls(
            **{name: d[name] for name in _PLAIN_FIELDS},
            rebalance_durations=dict(durations or {}),
            rebalance_duration_sum_ms=d.get("rebalance_duration_sum_ms", 0),
            deleted_ms=d.get("deleted_ms"),
            other=_other_from_dict(d["other"]) if d.get("other") is not None else None,
            classic=_classic_from_dict(classic) if classic is not None else None,
            consumer=_consumer_from_dict(consumer) if consumer is not None else None,
            epoch_owners=_owners_from_json(d["epoch_owners"]),
            epoch_members={owner: BoundaryMember(**m) for owner, m in d["epoch_members"].items()},
            last_owner=_owners_from_json(d["last_owner"]),
            churn=[(int(t), c, h) for t, c, h in d["churn"]],
        )

    @classmethod
    def from_json(cls, text: str) -> GroupSnapshot:
        return cls.from_dict(json.loads(text))


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_LEAVES = (str, int, bool, float, type(None))


def plain(value: Any) -> Any:
    """``dataclasses.asdict`` (dataclasses as dicts, lists, tuples and dicts rebuilt) without its deep copy of
    each leaf, which the model's immutable leaves do not need: W2's JSON took 18 s through asdict, 8 s through this."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if kind is list:
        return [plain(v) for v in value]
    if kind is tuple:
        return tuple(plain(v) for v in value)
    names = _FIELD_NAMES.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(value):
            return copy.deepcopy(value)  # as asdict does with anything else
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(value))
    return {name: plain(getattr(value, name)) for name in names}


# Fields that JSON carries as they are.
_PLAIN_FIELDS = (
    "group", "topic_names", "rebalances_total", "partitions_moved_total", "empty_transitions_total",
    "recreations_total", "generations_advanced_total", "rebalance_causes", "departures",
    "last_rebalance_ms", "baseline_taken", "deleted_type", "last_generation", "epoch_generation",
    "epoch_type", "epoch_protocol", "epoch_leader", "last_seen_ms",
)


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


def _consumer_to_dict(state: ConsumerState) -> dict[str, Any]:
    """``held`` is set only between a leaving member's tombstones: no bytes for it otherwise."""
    d = plain(state)
    for member in d["members"].values():
        if member["held"] is None:
            del member["held"]
    return d


def _consumer_from_dict(d: Mapping[str, Any]) -> ConsumerState:
    members = {}
    for member_id, m in d["members"].items():
        members[member_id] = ConsumerMember(
            member_id=m["member_id"],
            metadata=MemberMetadata(**m["metadata"]) if m["metadata"] is not None else None,
            target=m["target"],
            current=CurrentAssignment(**m["current"]) if m["current"] is not None else None,
            active_ms=m.get("active_ms"),
            static_leave=bool(m.get("static_leave")),
            held=m.get("held"),
        )
    if "departed" in d:
        departed = {owner: Departed(**entry) for owner, entry in d["departed"].items()}
    else:  # format 4: removal times only
        departed = {owner: Departed(int(t)) for owner, t in d["departed_ms"].items()}
    return ConsumerState(
        d["group_epoch"], d["assignment_epoch"], members, d["epoch_bumped_ms"], departed,
        d.get("session_timeout_ms"), d.get("heartbeat_interval_ms"),
    )


def subscribed_topics(snapshot: GroupSnapshot) -> set[str]:
    """Topics (classic: names; KIP-848: ids, through the name map) the members subscribe to."""
    if snapshot.classic is not None:
        return {t for m in snapshot.classic.members for t in m.subscribed_topics}
    if snapshot.consumer is None:
        return set()
    names = {
        t for m in snapshot.consumer.members.values() if m.metadata for t in m.metadata.subscribed_topic_names
    }
    return {topic_id for topic_id, name in snapshot.topic_names.items() if name in names}


def referenced_topic_ids(snapshot: GroupSnapshot) -> set[str]:
    """KIP-848 topic ids in any member's records, the last boundary or the ownership history.

    Ids only, taken from the records' Uuid fields: the boundary's topics count only when the last
    boundary was a KIP-848 one (a group converted from classic keeps its classic boundary, by topic
    name, until its first KIP-848 one), so a topic name is never asked for as an id."""
    state = snapshot.consumer
    if state is None:
        return set()
    ids: set[str] = set()
    if snapshot.epoch_type in (CONSUMER, None):
        ids |= {topic for topic, _ in snapshot.last_owner} | {topic for topic, _ in snapshot.epoch_owners}
    for m in state.members.values():
        ids.update(m.target or ())
        if m.current is not None:
            ids.update(m.current.assigned)
            ids.update(m.current.pending_revocation)
    return ids


def intern_or_none(text: str | None) -> str | None:
    """Names that repeat across members, groups and generations (client ids, hosts, topics,
    assignors) are held once, not once per decoded record."""
    return None if text is None else intern(text)


def assignment_of(entries: Iterable[Mapping[str, Any]] | None, topic_field: str) -> Assignment:
    """Topic → sorted partitions, merging duplicate topic entries, dropping empty ones."""
    merged: dict[str, set[int]] = {}
    for entry in entries or ():
        topic = entry.get(topic_field)
        partitions = entry.get("partitions") or ()
        if topic is not None and partitions:
            merged.setdefault(intern(topic), set()).update(int(p) for p in partitions)
    return {topic: sorted(parts) for topic, parts in sorted(merged.items())}


def owners_of(holdings: Iterable[tuple[str, Assignment | None]]) -> dict[TopicPartition, str]:
    return {
        (topic, p): owner
        for owner, assignment in holdings
        for topic, parts in (assignment or {}).items()
        for p in parts
    }


def member_keys(snapshot: GroupSnapshot) -> list[str]:
    if snapshot.classic is not None:
        return [m.owner for m in snapshot.classic.members]
    if snapshot.consumer is not None:
        return [m.owner for m in snapshot.consumer.members.values()]
    if snapshot.other is not None:
        return [m.owner for m in snapshot.other.members.values() if m.known]
    return []


def learn_topic(snapshot: GroupSnapshot, topic_id: str | None, name: str | None) -> None:
    if topic_id and topic_id != ZERO_UUID and name:
        snapshot.topic_names[topic_id] = name


# --------------------------------------------------------------- share and streams groups


@dataclass
class OtherMember:
    """A share- or streams-group member, as far as its records tell.

    ``assigned`` counts what the member holds now (current assignment record): share
    groups, partitions (several members may share one); streams groups, active tasks
    (one per input partition of a subtopology). ``member_epoch`` / ``state`` are the
    current assignment's (state: Kafka's member state number; which one is stable differs by
    protocol, see :mod:`streaming.groups.share_streams`). ``partitions``:
    share groups, the partitions held by topic id, so a partition several members share
    counts once in the group's total (empty for streams groups).
    """

    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int | None = None
    state: int | None = None
    assigned: int = 0
    target: int | None = None
    known: bool = False  # its metadata record is there (not tombstoned)
    partitions: dict[str, list[int]] = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return self.instance_id or self.member_id


@dataclass
class OtherGroupState:
    """A share (KIP-932) or streams (KIP-1071) group: type, epochs, members.

    Both follow KIP-848's layout (group epoch, target assignment epoch, per-member
    metadata, target and current assignment records), so the state label is derived the
    same way; no rebalance events are made for them. Streams groups add a topology, which
    Kafka must validate against the cluster's topics before it assigns any task:
    ``topology_epoch`` (its record, type 23) and ``validated_topology_epoch`` (the group
    metadata's; None where the layout has no such field, so readiness is unknown).
    """

    group_type: str
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: dict[str, OtherMember] = field(default_factory=dict)
    topology_epoch: int | None = None
    validated_topology_epoch: int | None = None

    def member(self, member_id: str) -> OtherMember:
        found = self.members.get(member_id)
        if found is None:
            found = self.members[member_id] = OtherMember(member_id)
        return found


def _other_from_dict(d: Mapping[str, Any]) -> OtherGroupState:
    members = {k: OtherMember(**m) for k, m in d["members"].items()}
    return OtherGroupState(d["group_type"], d["group_epoch"], d["assignment_epoch"], members,
                           d.get("topology_epoch"), d.get("validated_topology_epoch"))

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
      tombstone that was not a protocol conversion. Counted in ``recreations_total``;
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

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from decoders.records import CONSUMER_GROUP_TYPES, GROUP_METADATA_TYPE, OFFSET_COMMIT_TYPES, Record

CLASSIC = "classic"
CONSUMER = "consumer"

# Kafka's text form of the all-zero uuid: "no topic id" in offset-commit values.
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"

# KIP-848 member states (type 8 ``state``); only STABLE matters for the group state label.
MEMBER_STATE_STABLE = 0

# Bump when the JSON layout changes; from_json refuses layouts it does not know.
# Format 3 (before rebalance durations) is still read: its groups start with an empty histogram.
SNAPSHOT_FORMAT = 4
_READABLE_FORMATS = (3, SNAPSHOT_FORMAT)

# Upper bounds (seconds) of the rebalance duration histogram's buckets; an implicit +Inf
# follows. Classic sync phases take milliseconds to the leader's whole assignment time, a
# KIP-848 assignment up to its batching interval and beyond. Snapshots keep counts by
# bucket label: changing these bounds needs a new snapshot format.
REBALANCE_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
DURATION_BUCKET_LABELS = (*(repr(b) for b in REBALANCE_DURATION_BUCKETS), "+Inf")

# The cause labels of a rebalance (a bounded set: they become metric label values).
# Each is defined where it is computed, in :func:`_causes`.
CAUSES = (
    "members_joined",
    "members_left",
    "static_member_replaced",
    "subscription_changed",
    "partitions_added",
    "assignor_changed",
    "leader_changed",
    "protocol_converted",
    "unknown",
)

# How a member left, inferred by :func:`classify_departure` (bounded label set).
DEPARTURES = ("left_cleanly", "session_timeout", "poll_timeout", "unknown")

# Kafka's default group.consumer.session.timeout.ms: KIP-848 records carry no session
# timeout for members speaking the consumer protocol (the broker config decides it).
DEFAULT_CONSUMER_SESSION_TIMEOUT_MS = 45_000

# Member churn: joins and leaves kept for this long (the storm alert looks at 10 minutes;
# an hour shows who kept coming and going), at most this many per group, and the
# summary reports at most this many (client id, host) pairs per group.
CHURN_WINDOW_MS = 3_600_000
CHURN_LOG_CAP = 256
MEMBER_CHURN_CAP = 10

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
    """A KIP-848 group: group epoch (type 3), target epoch (type 6) and its members.

    ``epoch_bumped_ms`` is when the group epoch first moved ahead of the target epoch
    (the start of the pending assignment); ``departed_ms`` when each member that left
    since the last boundary was removed (its subscription tombstone), by owner.
    """

    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    epoch_bumped_ms: int | None = None
    departed_ms: dict[str, int] = field(default_factory=dict)

    def member(self, member_id: str) -> ConsumerMember:
        return self.members.setdefault(member_id, ConsumerMember(member_id))


@dataclass
class BoundaryMember:
    """What a boundary remembers of each member: enough to explain its departure later.

    ``subscription`` is the sorted subscribed topic names (a KIP-848 regex as
    ``"regex:<pattern>"``).
    """

    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    subscription: list[str] = field(default_factory=list)


@dataclass
class GroupSnapshot:
    """Everything kept per group between micro-batches.

    At most one of ``classic`` / ``consumer`` is set; neither is set once the group's
    metadata was tombstoned (the core may still hold its committed offsets;
    ``deleted_type`` says which protocol was deleted until new metadata tells a
    conversion from a re-creation). The ``epoch_*`` fields describe the last boundary
    (see the module docstring): its generation / target epoch, group type, assignor,
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
        return CONSUMER if self.consumer is not None else CLASSIC

    @property
    def has_metadata(self) -> bool:
        """False once the group's metadata was tombstoned (or never seen)."""
        return self.classic is not None or self.consumer is not None

    def topic_label(self, topic: str) -> str:
        """A topic for display: KIP-848 assignments carry ids, shown by name when known."""
        return self.topic_names.get(topic, topic)

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _PLAIN_FIELDS}
        d.update(
            v=SNAPSHOT_FORMAT,
            classic=asdict(self.classic) if self.classic is not None else None,
            consumer=asdict(self.consumer) if self.consumer is not None else None,
            epoch_owners=_owners_to_json(self.epoch_owners),
            epoch_members={owner: asdict(m) for owner, m in self.epoch_members.items()},
            last_owner=_owners_to_json(self.last_owner),
            churn=[list(entry) for entry in self.churn],
        )
        if self.rebalance_durations:  # most groups never had a measured rebalance: no bytes for them
            d.update(rebalance_durations=self.rebalance_durations,
                     rebalance_duration_sum_ms=self.rebalance_duration_sum_ms)
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


def _consumer_from_dict(d: Mapping[str, Any]) -> ConsumerState:
    members = {}
    for member_id, m in d["members"].items():
        members[member_id] = ConsumerMember(
            member_id=m["member_id"],
            metadata=MemberMetadata(**m["metadata"]) if m["metadata"] is not None else None,
            target=m["target"],
            current=CurrentAssignment(**m["current"]) if m["current"] is not None else None,
        )
    return ConsumerState(
        d["group_epoch"], d["assignment_epoch"], members, d["epoch_bumped_ms"], dict(d["departed_ms"])
    )


# --------------------------------------------------------------------------- events

_EVENT_TUPLES = ("members_joined", "members_left", "moved_partitions", "causes", "departures",
                 "joined_clients", "left_clients")


@dataclass(frozen=True)
class RebalanceEvent:
    """One rebalance, as defined in the module docstring.

    Members are named by owner (instance id for static members, else member id);
    ``joined_clients`` / ``left_clients`` name the same members as
    ``"client_id@client_host"``, in the same order as ``members_joined`` /
    ``members_left``; ``departures`` is :data:`DEPARTURES` class of each member left
    (same order). ``moved_partitions`` holds ``"topic:partition"`` strings (KIP-848
    topics by name when the id→name map knows them, else by id). ``causes`` is a
    sorted subset of :data:`CAUSES`. ``duration_ms`` is the measurable part of the
    rebalance or None: classic = the sync phase (record time − the state timestamp the
    v2+ value carries: from the end of the join phase to the leader's assignment being
    written); KIP-848 = from the group-epoch bump to the target assignment epoch
    catching up (the assignor's work, including 4.3's assignment batching; members'
    reconciliation afterwards is not included). List fields are tuples here and
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
    causes: tuple[str, ...] = ()
    departures: tuple[str, ...] = ()
    joined_clients: tuple[str, ...] = ()
    left_clients: tuple[str, ...] = ()
    duration_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in _EVENT_TUPLES:
            d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RebalanceEvent:
        values = {name: d[name] for name in cls.__dataclass_fields__ if name in d}
        for name in _EVENT_TUPLES:
            values[name] = tuple(values.get(name) or ())
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


def _client_label(member: BoundaryMember) -> str:
    """How a member is named for churn: client id and host (stable across restarts)."""
    return f"{member.client_id}@{member.client_host}"


# --------------------------------------------------------------------------- departures


def classify_departure(
    member: BoundaryMember, last_commit_ms: int | None, departed_ms: int
) -> str:
    """How a member left, inferred from its last offset commit (one of :data:`DEPARTURES`).

    ``gap`` = ``departed_ms`` (when the coordinator removed it: KIP-848 = its
    tombstones; classic = the end of the join phase that followed, the earliest time the
    records give) − ``last_commit_ms`` (the latest commit on a partition it owned).
    A member that stops polling commits nothing for max.poll.interval.ms before it is
    removed (gap ≥ rebalance timeout → ``poll_timeout``); a crashed or partitioned one
    is removed a session timeout after its last heartbeat, and it committed shortly
    before (session timeout ≤ gap → ``session_timeout``); a member that closes commits
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


def _last_commit(
    snapshot: GroupSnapshot, owner: str, commits: Mapping[TopicPartition, int] | None
) -> int | None:
    """Latest commit time on a partition ``owner`` held at the last boundary (by topic name)."""
    if commits is None:
        return None
    times = [
        commits[key]
        for (topic, p), held_by in snapshot.epoch_owners.items()
        if held_by == owner and (key := (snapshot.topic_label(topic), p)) in commits
    ]
    return max(times, default=None)


# --------------------------------------------------------------------------- record folding


def apply_record(
    snapshot: GroupSnapshot | None,
    record: Record,
    record_time_ms: int,
    last_commit_ms: Mapping[TopicPartition, int] | None = None,
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

    ``last_commit_ms`` maps (topic name, partition) to the group's latest commit time
    on it, as of this record (commits before it in the log); it only feeds
    :func:`classify_departure`. Without it every departure is ``unknown``.
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
        events = _apply_classic(snapshot, record.value, record_time_ms, last_commit_ms)
    else:
        events = _apply_consumer(snapshot, record, record_time_ms, last_commit_ms)
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


def _metadata_arrives(snapshot: GroupSnapshot, group_type: str) -> None:
    """Metadata after a tombstone: a protocol conversion, or a re-created group.

    Kafka converts a group only while it has members, writing the old protocol's
    tombstones and the new protocol's records together; a group is deleted only when
    empty. So new metadata of the other type while the last boundary had members is a
    conversion (boundary kept); anything else is a re-creation.
    """
    deleted, snapshot.deleted_type = snapshot.deleted_type, None
    if deleted is None:
        return
    if deleted != group_type and snapshot.epoch_members:
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


def _advance_generation(snapshot: GroupSnapshot, generation: int) -> None:
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


def _move_boundary(
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
class _When:
    """Times of a boundary: the event time, when leavers were removed, the measured duration."""

    time: int
    departed: Mapping[str, int]
    duration: int | None

    def departed_at(self, owner: str) -> int:
        return self.departed.get(owner, self.time)


@dataclass(frozen=True)
class _Assignment:
    """A completed assignment, as either protocol's records describe it."""

    generation: int
    owners: dict[TopicPartition, str]
    members: dict[str, BoundaryMember]
    protocol: str | None  # classic: the selected assignor; KIP-848: the server assignor most members ask for
    leader: str | None  # classic only


def _boundary(
    snapshot: GroupSnapshot, new: _Assignment, at: _When, commits: Mapping[TopicPartition, int] | None
) -> list[RebalanceEvent]:
    """Apply the rebalance definition to a completed assignment (see the module docstring)."""
    if snapshot.baseline_taken and new.generation == snapshot.epoch_generation:
        _move_boundary(snapshot, new.generation, new.owners, new.members)  # same generation, rewritten
        return []
    events: list[RebalanceEvent] = []
    if not snapshot.baseline_taken:
        snapshot.baseline_taken = bool(new.members)
    elif not new.members:
        _empty_transition(snapshot, at, commits)
    else:
        events.append(_rebalance(snapshot, new, at, commits))
    snapshot.epoch_type = snapshot.group_type
    snapshot.epoch_protocol, snapshot.epoch_leader = new.protocol, new.leader
    _move_boundary(snapshot, new.generation, new.owners, new.members)
    return events


def _empty_transition(snapshot: GroupSnapshot, at: _When, commits: Mapping[TopicPartition, int] | None) -> None:
    """The last members left: counted apart, departures classified, no event."""
    if not snapshot.epoch_members:
        return
    snapshot.empty_transitions_total += 1
    for owner, member in snapshot.epoch_members.items():
        how = classify_departure(member, _last_commit(snapshot, owner, commits), at.departed_at(owner))
        snapshot.departures[how] = snapshot.departures.get(how, 0) + 1
    _record_churn(snapshot, at.time, snapshot.epoch_members.values())


def _rebalance(
    snapshot: GroupSnapshot, new: _Assignment, at: _When, commits: Mapping[TopicPartition, int] | None
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
    joined = sorted(set(members) - set(old_members))
    left = sorted(set(old_members) - set(members))
    departures = tuple(
        classify_departure(old_members[o], _last_commit(snapshot, o, commits), at.departed_at(o)) for o in left
    )
    causes = _causes(snapshot, new)
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
        moved_partitions=tuple(f"{topic}:{p}" for topic, p in moved),
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


def _causes(snapshot: GroupSnapshot, new: _Assignment) -> tuple[str, ...]:
    """Why the group rebalanced, read from the difference with the previous boundary.

    - ``members_joined`` / ``members_left``: an owner (instance id, else member id) is
      in only one of the two boundaries.
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
        "members_joined": bool(set(members) - set(old)),
        "members_left": bool(set(old) - set(members)),
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


# --------------------------------------------------------------------------- classic


def _apply_classic(
    snapshot: GroupSnapshot,
    value: Mapping[str, Any] | None,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
) -> list[RebalanceEvent]:
    if value is None:
        if snapshot.classic is not None:
            snapshot.classic = None
            snapshot.deleted_type = CLASSIC
        return []
    _metadata_arrives(snapshot, CLASSIC)
    snapshot.consumer = None  # converted back from KIP-848 (its tombstones may be compacted away)
    state_ts = value.get("currentStateTimestamp")
    new = ClassicState(
        generation=int(value.get("generation") or 0),
        protocol_type=value.get("protocolType") or "",
        protocol=value.get("protocol"),
        leader=value.get("leader"),
        state_timestamp_ms=state_ts if state_ts is not None and state_ts >= 0 else None,
        members=[_classic_member(m) for m in value.get("members") or ()],
    )
    snapshot.classic = new
    _advance_generation(snapshot, new.generation)
    owners = _owners((m.owner, m.assigned) for m in new.members)
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
    at = _When(when, {}, duration)
    return _boundary(snapshot, _Assignment(new.generation, owners, members, new.protocol, _classic_leader(new)), at,
                     commits)


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


# --------------------------------------------------------------------------- KIP-848


def _apply_consumer(
    snapshot: GroupSnapshot, record: Record, record_time_ms: int, commits: Mapping[TopicPartition, int] | None
) -> list[RebalanceEvent]:
    record_type, key, value = record.record_type, record.key, record.value
    if value is None:
        _consumer_tombstone(snapshot, record, record_time_ms)
        return []
    if snapshot.consumer is None:  # new KIP-848 group, or converted from classic
        _metadata_arrives(snapshot, CONSUMER)
        snapshot.classic = None
        snapshot.consumer = ConsumerState()
    state = snapshot.consumer
    if record_type == 3:
        _group_epoch(snapshot, state, int(value.get("epoch") or 0), record_time_ms, commits)
    elif record_type == 4:
        for topic in value.get("topics") or ():
            _learn_topic(snapshot, topic.get("topicId"), topic.get("topicName"))
    elif record_type == 5:
        classic = value.get("classicMemberMetadata")
        session = classic.get("sessionTimeoutMs") if classic else None
        state.member(key["memberId"]).metadata = MemberMetadata(
            instance_id=value.get("instanceId"),
            rack_id=value.get("rackId"),
            client_id=value.get("clientId") or "",
            client_host=value.get("clientHost") or "",
            subscribed_topic_names=sorted(value.get("subscribedTopicNames") or ()),
            subscribed_topic_regex=value.get("subscribedTopicRegex"),
            rebalance_timeout_ms=value.get("rebalanceTimeoutMs"),
            server_assignor=value.get("serverAssignor"),
            # Absent, the tagged field decodes to Kafka's default (timeout 0).
            classic_session_timeout_ms=session or None,
        )
    elif record_type == 6:
        return _target_epoch(snapshot, state, value.get("assignmentEpoch"), record_time_ms, commits)
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


def _group_epoch(
    snapshot: GroupSnapshot,
    state: ConsumerState,
    epoch: int,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
) -> None:
    """A type 3 value: count the step, note when an assignment became pending, see Empty.

    Kafka removes a leaving KIP-848 member with its tombstones and a group-epoch bump
    in one write, and computes the next target only when a remaining member
    heartbeats. So when the last member leaves there may be no type 6 at all (newer
    brokers write one): the Empty transition is taken here, where both versions agree.
    """
    previous = snapshot.last_generation
    _advance_generation(snapshot, epoch)
    if previous is not None and epoch < previous:
        state.assignment_epoch = None
        state.epoch_bumped_ms = None
    state.group_epoch = epoch
    if state.assignment_epoch is not None and epoch > state.assignment_epoch and state.epoch_bumped_ms is None:
        state.epoch_bumped_ms = record_time_ms
    if snapshot.baseline_taken and snapshot.epoch_members and not state.members:
        _empty_transition(snapshot, _When(record_time_ms, {**state.departed_ms}, None), commits)
        snapshot.epoch_protocol = snapshot.epoch_leader = None
        snapshot.epoch_type = CONSUMER
        _move_boundary(snapshot, snapshot.epoch_generation or 0, {}, {})
        state.epoch_bumped_ms = None
        state.departed_ms = {}


def _consumer_tombstone(snapshot: GroupSnapshot, record: Record, record_time_ms: int) -> None:
    state = snapshot.consumer
    if state is None:
        return
    record_type = record.record_type
    if record_type == 3:  # written last when a consumer group is deleted (or converted)
        snapshot.consumer = None
        snapshot.deleted_type = CONSUMER
    elif record_type == 6:
        state.assignment_epoch = None
    elif record_type in (5, 7, 8):
        member = state.members.get(record.key.get("memberId"))
        if member is None:
            return
        if record_type == 5:
            state.departed_ms[member.owner] = record_time_ms
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
    snapshot.epoch_members.setdefault(member.owner, _consumer_boundary_member(member))


def _consumer_boundary_member(member: ConsumerMember) -> BoundaryMember:
    meta = member.metadata
    if meta is None:
        return BoundaryMember(member.member_id)
    subscription = [*meta.subscribed_topic_names]
    if meta.subscribed_topic_regex:
        subscription.append(f"regex:{meta.subscribed_topic_regex}")
    return BoundaryMember(
        member.member_id, meta.instance_id, meta.client_id, meta.client_host,
        meta.classic_session_timeout_ms or DEFAULT_CONSUMER_SESSION_TIMEOUT_MS,
        meta.rebalance_timeout_ms, subscription,
    )


def _consumer_boundary_members(state: ConsumerState) -> dict[str, BoundaryMember]:
    return {m.owner: _consumer_boundary_member(m) for m in state.members.values()}


def _target_epoch(
    snapshot: GroupSnapshot,
    state: ConsumerState,
    epoch: int | None,
    record_time_ms: int,
    commits: Mapping[TopicPartition, int] | None,
) -> list[RebalanceEvent]:
    state.assignment_epoch = epoch
    if epoch is None:
        return []
    owners = _owners((m.owner, m.target) for m in state.members.values())
    members = _consumer_boundary_members(state)
    bumped = state.epoch_bumped_ms
    duration = record_time_ms - bumped if bumped is not None and record_time_ms >= bumped else None
    at = _When(record_time_ms, {**state.departed_ms}, duration)
    if state.group_epoch is None or epoch >= state.group_epoch:
        state.epoch_bumped_ms = None
    state.departed_ms = {}
    return _boundary(snapshot, _Assignment(epoch, owners, members, _preferred_assignor(state), None), at, commits)


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
    instance_id: str | None = None
    subscribed_topics: tuple[str, ...] = ()  # classic only: what the assignor advisor needs


class MemberChurn(NamedTuple):
    """Joins plus leaves of one (client id, client host) within the churn window."""

    client_id: str
    client_host: str
    count: int


@dataclass(frozen=True)
class GroupSummary:
    """What the exporter shows for one group; counters are absolute (survive restarts).

    ``generation`` is the classic generation or the KIP-848 group epoch (None when not
    known yet); ``protocol`` is the classic assignor or the KIP-848 preferred server
    assignor ("" when none); ``leader`` is the classic leader's owner key ("" for
    KIP-848); ``state`` is :func:`group_state`'s label. ``rebalance_causes`` and
    ``departures`` count by :data:`CAUSES` / :data:`DEPARTURES` label (a rebalance has
    one or more causes); ``member_churn`` ranks the clients that joined or left most in
    the last :data:`CHURN_WINDOW_MS` before ``as_of_ms`` (at most
    :data:`MEMBER_CHURN_CAP`). ``rebalance_durations`` are the cumulative counts of the
    duration histogram per label of :data:`DURATION_BUCKET_LABELS` (empty before the
    first measured rebalance; ``rebalance_duration_sum_ms`` their sum).
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
    empty_transitions_total: int
    recreations_total: int
    generations_advanced_total: int
    rebalance_causes: dict[str, int]
    departures: dict[str, int]
    member_churn: tuple[MemberChurn, ...]
    last_rebalance_ms: int | None
    last_seen_ms: int
    as_of_ms: int
    members: tuple[MemberSummary, ...]
    rebalance_durations: tuple[int, ...] = ()
    rebalance_duration_sum_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["member_churn"] = [list(entry) for entry in self.member_churn]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupSummary:
        values = dict(d)
        values["members"] = tuple(MemberSummary(**{**m, "subscribed_topics": tuple(m.get("subscribed_topics") or ())})
                                  for m in d["members"])
        values["member_churn"] = tuple(MemberChurn(*entry) for entry in d["member_churn"])
        values["rebalance_durations"] = tuple(d.get("rebalance_durations") or ())
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> GroupSummary:
        return cls.from_dict(json.loads(text))


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
    else ``Stable``.
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
            MemberSummary(m.owner, m.member_id, m.client_id, m.client_host, _count(m.assigned),
                          m.instance_id, tuple(m.subscribed_topics))
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


def _cumulative(counts: Mapping[str, int]) -> tuple[int, ...]:
    """Cumulative counts per :data:`DURATION_BUCKET_LABELS` entry; () without observations."""
    if not counts:
        return ()
    return tuple(itertools.accumulate(counts.get(label, 0) for label in DURATION_BUCKET_LABELS))


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
    )

"""Every message that crosses a stage of the job, in one place.

The stages (``decode`` in the executors; ``groups``, ``lag``, ``metrics``, ``advisor``,
``logs`` and ``driver`` on the driver) import their messages from here and never from each
other, so a reader finds what travels between them without following the pipeline:

* decode -> driver: :data:`STAGE_SCHEMA` rows, one :class:`OutputKind` each, read by the
  driver as a :class:`BatchInput`;
* groups -> driver: a :class:`BatchResult` per batch (its :class:`RebalanceEvent` list and
  :class:`DeadLetter` sample), and a :class:`GroupSummary` per changed group;
* driver -> progress: a :class:`BatchReport`;
* cluster -> groups: :class:`ClusterFacts`, what the group stage asks the cluster (KIP-848 topic
  ids by name, each KIP-848 group's session timeout and heartbeat interval: :class:`GroupTimeouts`).

Label sets that become metric label values (:data:`CAUSES`, :data:`DEPARTURES`, the duration
buckets) are part of the contract too. A partition is a :data:`TopicPartition` tuple
everywhere; only the event log writes it out as ``"topic:partition"``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import IntEnum
from typing import Any, NamedTuple, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

TopicPartition = tuple[str, int]

_Class = TypeVar("_Class", bound=type)


def tuple_pickled(cls: _Class) -> _Class:
    """Pickle a frozen dataclass as its field values alone, not a dict of field names and values: the
    state-store fold ships a change per changed group from the executors (a W2 group's 1.5 KB pickled, field
    names more than half of it). Only for what lives within one batch: a pickle from another version of the
    class would read its fields wrongly."""
    names = tuple(f.name for f in fields(cls))

    def __getstate__(self: Any) -> tuple[Any, ...]:
        return tuple(map(self.__dict__.__getitem__, names))

    def __setstate__(self: Any, state: tuple[Any, ...]) -> None:
        self.__dict__.update(zip(names, state, strict=True))

    setattr(cls, "__getstate__", __getstate__)  # noqa: B010 (mypy: no assigning to a method of a type variable)
    setattr(cls, "__setstate__", __setstate__)  # noqa: B010
    return cls

CLASSIC = "classic"
CONSUMER = "consumer"
SHARE = "share"  # KIP-932 share groups
STREAMS = "streams"  # KIP-1071 streams groups


# --------------------------------------------------------------------------- decode -> driver


class OutputKind(IntEnum):
    """The kinds of row in :data:`STAGE_SCHEMA`; the columns a kind does not use are null."""

    COMMIT = 0
    """The latest offset commit (``offset`` null: an offset tombstone) of one group/topic/partition
    in one task; ``count`` = commits (tombstones excluded) it stands for."""
    GROUP_RECORD = 1
    """A classic group-metadata or KIP-848 consumer-group record, ``decoded`` (see
    :func:`decoders.folding.fold_json`) for the driver to fold as it is (``raw_key`` and
    ``raw_value`` are null: state deltas written before this version carry them instead)."""
    DEAD_LETTER = 2
    """An undecodable record's bytes and reason (a bounded sample per task)."""
    RECORD_COUNT = 3
    """``count`` records of ``record_type`` in one task; ``record_time_ms`` = the newest one's time."""
    ERROR_COUNT = 4
    """``count`` undecodable records with reason ``error`` in one task."""
    PARTITION_READ = 5
    """The newest record (``record_time_ms``, decodable or not) one task read from offsets-topic partition
    ``kafka_partition``: how far the batch has read each partition (see :attr:`BatchInput.folded_through_ms`)."""


STAGE_SCHEMA = pa.schema([
    ("kind", pa.int8()),
    ("group", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("commit_timestamp", pa.int64()),
    ("record_type", pa.int16()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("record_time_ms", pa.int64()),
    ("count", pa.int64()),
    ("error", pa.string()),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
    ("decoded", pa.string()),
    ("topic_id", pa.binary()),  # 16 bytes; Spark's Arrow conversion has no fixed-size binary
])
"""What the decode stage (executors) hands the driver. Offset commits arrive reduced inside
each task (at most one COMMIT row per group/topic/partition and stretch between two of the
group's records), raw bytes only for group records and a bounded sample of undecodable ones.
A COMMIT row's ``topic_id`` is the id (16 bytes) its value carries beside the topic's name
(OffsetCommitValue v4, Kafka 4.1+; null before, or for Kafka's zero id): the group stage learns
KIP-848 topic names from it without asking the cluster. State deltas written before it have no
such column."""


@dataclass(frozen=True)
class BatchInput:
    """The rows of one batch by kind (each a :data:`STAGE_SCHEMA` table) and the batch's counts."""

    commits: pa.Table
    group_records: pa.Table
    dead_letters: pa.Table
    records: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    newest_record_ms: int | None = None
    folded_through_ms: int | None = None
    """Every record written to the offsets topic before this time is in this batch or an earlier one: the
    oldest of the partitions' newest records read. Each partition the batch read nothing from was read to
    its end (Spark's ``maxOffsetsPerTrigger`` gives every partition with records waiting at least one), and
    each partition it read was read up to its newest record (times within a partition only grow). With the
    cap a batch can read one partition up to now and another an hour behind: the newest record of the
    whole batch would claim the hour was folded."""

    @classmethod
    def from_arrow(cls, table: pa.Table) -> BatchInput:
        table = table.cast(STAGE_SCHEMA)
        kind = table.column("kind")

        def of(k: OutputKind) -> pa.Table:
            return table.filter(pc.equal(kind, int(k)))

        records: Counter[int] = Counter()
        newest: int | None = None
        counts = of(OutputKind.RECORD_COUNT)
        columns = (counts.column(name).to_pylist() for name in ("record_type", "count", "record_time_ms"))
        for record_type, count, when in zip(*columns, strict=True):
            records[record_type] += count
            if when is not None:
                newest = when if newest is None else max(newest, when)
        read: dict[int, int] = {}
        partition_reads = of(OutputKind.PARTITION_READ)
        for partition, when in zip(partition_reads.column("kafka_partition").to_pylist(),
                                   partition_reads.column("record_time_ms").to_pylist(), strict=True):
            read[partition] = max(read.get(partition, when), when)
        errors: Counter[str] = Counter()
        error_counts = of(OutputKind.ERROR_COUNT)
        for reason, count in zip(error_counts.column("error").to_pylist(), error_counts.column("count").to_pylist(),
                                 strict=True):
            errors[reason] += count
        return cls(of(OutputKind.COMMIT), of(OutputKind.GROUP_RECORD), of(OutputKind.DEAD_LETTER),
                   records, errors, newest, min(read.values()) if read else newest)

    @classmethod
    def empty(cls) -> BatchInput:
        return cls.from_arrow(STAGE_SCHEMA.empty_table())


@dataclass(frozen=True)
class DeadLetter:
    """An undecodable record, kept with its bytes and where it came from."""

    kafka_partition: int
    kafka_offset: int
    record_time_ms: int | None
    reason: str
    key: bytes | None
    value: bytes | None


# --------------------------------------------------------------------------- label sets

# Upper bounds (seconds) of the rebalance duration histogram's buckets; an implicit +Inf
# follows. Classic sync phases take milliseconds to the leader's whole assignment time, a
# KIP-848 assignment up to its batching interval and beyond. Snapshots keep counts by
# bucket label: changing these bounds needs a new snapshot format.
# Kafka's own names of the states in which a group is rebalancing (classic: PreparingRebalance and
# CompletingRebalance; KIP-848 consumer groups: Assigning and Reconciling).
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
REBALANCE_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
DURATION_BUCKET_LABELS = (*(repr(b) for b in REBALANCE_DURATION_BUCKETS), "+Inf")

# The cause labels of a rebalance (a bounded set: they become metric label values).
# Each is defined where it is computed, in :func:`streaming.groups.boundary.causes`.
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

# How a member left, inferred by :func:`streaming.groups.boundary.classify_departure`.
DEPARTURES = ("left_cleanly", "session_timeout", "poll_timeout", "unknown")

# The summary reports at most this many (client id, host) pairs of member churn per group.
MEMBER_CHURN_CAP = 10

# What a group is doing, from :func:`streaming.groups.summary.activity` (a metric label): ``active``, it has
# members; ``inactive``, none, but it had members or committed within ``--abandoned-after``; ``abandoned``,
# neither for longer than that (its offsets stay until Kafka's offsets.retention.minutes expires them).
ACTIVE, INACTIVE, ABANDONED = "active", "inactive", "abandoned"
ACTIVITIES = (ACTIVE, INACTIVE, ABANDONED)


# --------------------------------------------------------------------------- groups -> driver

_EVENT_TUPLES = ("members_joined", "members_left", "causes", "departures", "joined_clients", "left_clients")


@dataclass(frozen=True)
class RebalanceEvent:
    """One rebalance, as :mod:`streaming.groups.boundary` defines it.

    Members are named by owner (instance id for static members, else member id);
    ``joined_clients`` / ``left_clients`` name the same members as
    ``"client_id@client_host"``, in the same order as ``members_joined`` /
    ``members_left``; ``departures`` is the :data:`DEPARTURES` class of each member left
    (same order). ``moved_partitions`` holds (topic, partition) pairs (KIP-848 topics by
    name once resolved, else by id). ``causes`` is a sorted subset of :data:`CAUSES`.
    ``duration_ms`` is the measurable part of the rebalance or None: classic = the sync
    phase (record time − the state timestamp the v2+ value carries: from the end of the
    join phase to the leader's assignment being written); KIP-848 = from the group-epoch
    bump to the target assignment epoch catching up (the assignor's work, including 4.3's
    assignment batching; members' reconciliation afterwards is not included).
    :meth:`to_dict` is the event log's row: list fields as lists, moved partitions as
    ``"topic:partition"`` strings (see :mod:`streaming.logs.events`).
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
    moved_partitions: tuple[TopicPartition, ...]
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
        # Field by field, not dataclasses.asdict: every field is a scalar or a tuple of them, and asdict's
        # deep copy of a rebalance's moved partitions cost about 1 ms an event (a batch of 1,000 rebalances:
        # a quarter of its fold).
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _EVENT_TUPLES:
            d[name] = list(d[name])
        d["moved_partitions"] = [f"{topic}:{partition}" for topic, partition in self.moved_partitions]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RebalanceEvent:
        values = {name: d[name] for name in cls.__dataclass_fields__ if name in d}
        for name in _EVENT_TUPLES:
            values[name] = tuple(values.get(name) or ())
        values["moved_partitions"] = tuple(_partition(label) for label in values.get("moved_partitions") or ())
        return cls(**values)


def _partition(label: str | tuple[str, int] | list[Any]) -> TopicPartition:
    """A moved partition as the event log writes it (``"topic:partition"``) or as a pair."""
    if isinstance(label, str):
        topic, _, number = label.rpartition(":")
        return topic, int(number)
    topic, partition = label
    return str(topic), int(partition)


@tuple_pickled
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
    # KIP-848 only (None elsewhere): the target assignment epoch minus the member's epoch (how many
    # target assignments it has not caught up with), and the partitions it must still give up or
    # take up to own exactly its target.
    epoch_lag: int | None = None
    unreconciled_partitions: int | None = None


class MemberChurn(NamedTuple):
    """Joins plus leaves of one (client id, client host) within the churn window."""

    client_id: str
    client_host: str
    joins_and_leaves: int


def _counter(kind: str) -> dict[str, str]:
    """Field metadata declaring a summary field a counter: ``total`` (an int), ``by_label`` (counts by label),
    ``histogram`` (cumulative bucket counts). Each one shown never steps back (:mod:`streaming.driver.floors`)."""
    return {"counter": kind}


@tuple_pickled
@dataclass(frozen=True)
class GroupSummary:
    """What the exporter shows for one group; counters are absolute (survive restarts).

    ``generation`` is the classic generation or the KIP-848 group epoch (None when not
    known yet); ``protocol`` is the classic assignor or the KIP-848 preferred server
    assignor ("" when none); ``leader`` is the classic leader's owner key ("" for
    KIP-848); ``state`` is :func:`streaming.groups.summary.group_state`'s label.
    ``rebalance_causes`` and ``departures`` count by :data:`CAUSES` / :data:`DEPARTURES`
    label (a rebalance has one or more causes); ``member_churn`` ranks the clients that
    joined or left most in the hour before ``as_of_ms`` (at most :data:`MEMBER_CHURN_CAP`).
    ``rebalance_durations`` are the cumulative counts of the duration histogram per label
    of :data:`DURATION_BUCKET_LABELS` (empty before the first measured rebalance;
    ``rebalance_duration_sum_ms`` their sum). ``rebalance_timeout_ms`` is the longest of the
    members' rebalance timeouts in the group's records (None when none says), how long Kafka
    waits for members to rejoin.

    ``activity`` is one of :data:`ACTIVITIES` as of ``as_of_ms`` ("" in summaries written before it);
    ``last_member_ms`` (when a group without members last had some, as far as its records tell) and
    ``last_commit_ms`` (its latest offset commit) are what it was judged on, None when unknown or, for
    ``last_member_ms``, while the group has members. ``assigned_topics`` are the topics its members are
    assigned or being assigned (KIP-848: current, target and pending revocation), None where that is not
    known (no members, share and streams groups, a KIP-848 topic id without a name).
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
    rebalances_total: int = field(metadata=_counter("total"))
    partitions_moved_total: int = field(metadata=_counter("total"))
    empty_transitions_total: int = field(metadata=_counter("total"))
    recreations_total: int = field(metadata=_counter("total"))
    generations_advanced_total: int = field(metadata=_counter("total"))
    rebalance_causes: dict[str, int] = field(metadata=_counter("by_label"))
    departures: dict[str, int] = field(metadata=_counter("by_label"))
    member_churn: tuple[MemberChurn, ...]
    last_rebalance_ms: int | None
    last_seen_ms: int
    as_of_ms: int
    members: tuple[MemberSummary, ...]
    rebalance_durations: tuple[int, ...] = field(default=(), metadata=_counter("histogram"))
    rebalance_duration_sum_ms: int = field(default=0, metadata=_counter("total"))
    rebalance_timeout_ms: int | None = None
    activity: str = ""
    last_member_ms: int | None = None
    last_commit_ms: int | None = None
    assigned_topics: tuple[str, ...] | None = None

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
        if d.get("assigned_topics") is not None:
            values["assigned_topics"] = tuple(d["assigned_topics"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> GroupSummary:
        return cls.from_dict(json.loads(text))


# (field name, kind) of every counter GroupSummary declares, in field order.
SUMMARY_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (f.name, f.metadata["counter"]) for f in fields(GroupSummary) if "counter" in f.metadata)


@dataclass
class BatchResult:
    """What one batch changed: events, the groups to re-export or forget, offsets that moved."""

    events: list[RebalanceEvent] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    # Of ``changed``, the groups a group record was folded for; the others changed by commits alone.
    folded: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    undecodable: Counter[int] = field(default_factory=Counter)  # of ``errors``, by record type
    dead_letters: list[DeadLetter] = field(default_factory=list)


@tuple_pickled
@dataclass(frozen=True)
class GroupChange:
    """One group a batch changed, as the group stage hands it to the driver (one per group per batch).

    ``summary`` None: only commits moved, and nothing else a summary shows can have moved with them,
    so only the group's offset series, commit count and lag are rendered again. ``assignments``
    (each member's partitions by owner key) is None exactly then: the members' partitions stay as they
    were. Plain data only: with ``--fold state-store`` it travels as a row from the executors
    (:mod:`streaming.groups.stateful.rows`).
    """

    group: str
    summary: GroupSummary | None
    committed: Mapping[TopicPartition, int]
    commits_total: int = 0
    last_commit_ms: int = 0
    assignments: Mapping[str, Sequence[TopicPartition]] | None = None


# --------------------------------------------------------------------------- lag -> metrics


@dataclass(frozen=True)
class OffsetsTopicGap:
    """A partition of the offsets topic: high watermark − last stable offset, and since when
    the last stable offset has sat still while that gap was open (a lower bound on the age
    of the transaction holding it)."""

    gap: int
    stuck_since: float | None


class SourceOffsets(Protocol):
    """The source topic's log offsets as the lag poller samples them, for the job's input lag
    (implemented by :class:`streaming.lag.tracker.LagTracker`)."""

    def set_watched(self, partitions: Iterable[TopicPartition]) -> None:
        """Sample these partitions' log offsets too (the job's source partitions)."""
        ...

    def log_range(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(log start, log end) of a fresh sample of the partition; None without one."""
        ...


# --------------------------------------------------------------------------- cluster -> groups


class GroupTimeouts(NamedTuple):
    """A KIP-848 group's consumer-protocol timeouts in force: its group config
    (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``), else the brokers'
    (``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


class ClusterFacts(Protocol):
    """What the group stage needs from the cluster and its records cannot tell (since Kafka 4.1 no
    record maps a KIP-848 topic id to its name; no record carries a KIP-848 group's session
    timeout). Implemented by :class:`streaming.cluster.metadata.TopicNames`; answers come from a
    cache, so asking is cheap."""

    def topic_names(self, topic_ids: Collection[str]) -> dict[str, str]:
        """Names of those of ``topic_ids`` the cluster knows (a deleted topic's id is left out)."""
        ...

    def learn(self, names: Mapping[str, str]) -> None:
        """Topic id → name pairs the records carry (offset commits' ``topic_id``)."""
        ...

    def consumer_group_timeouts(self, groups: Collection[str]) -> dict[str, GroupTimeouts]:
        """Each group's timeouts in force (see :class:`GroupTimeouts`); a group left out: not known."""
        ...


# --------------------------------------------------------------------------- driver -> progress


@dataclass(frozen=True)
class BatchReport:
    """What the progress line says about the latest batch the sink handled."""

    batch_id: int = -1
    records: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    groups: int = 0
    rebalances: int = 0
    collect_seconds: float = 0.0  # the Spark job: read, decode, Arrow to the driver
    fold_seconds: float = 0.0  # the group stage, event log, state delta, metrics

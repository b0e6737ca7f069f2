"""Folding one group record into its group's snapshot: the entry point of the group-state logic.

Pure functions: nothing here reads the clock or does I/O (every time is passed in), so a
batch replayed from a checkpoint gives the same snapshots and events. The record's type
picks the fold: classic group metadata (:mod:`streaming.groups.classic`) or the KIP-848
consumer-group records (:mod:`streaming.groups.consumer`); both end in the rebalance
definition of :mod:`streaming.groups.boundary`.
"""

from __future__ import annotations

from collections.abc import Mapping

from decoders.records import CONSUMER_GROUP_TYPES, GROUP_STATE_TYPES, OFFSET_COMMIT_TYPES, Record, RecordType
from streaming.groups.classic import apply_classic
from streaming.groups.consumer import apply_consumer
from streaming.groups.model import GroupSnapshot, learn_topic, member_keys, referenced_topic_ids
from streaming.groups.share_streams import apply_share_streams
from streaming.protocol import GroupTimeouts, RebalanceEvent, TopicPartition


def apply_record(
    snapshot: GroupSnapshot | None,
    record: Record,
    record_time_ms: int,
    last_commit_ms: Mapping[TopicPartition, int] | None = None,
    consumer_timeouts: GroupTimeouts | None = None,
) -> tuple[GroupSnapshot | None, list[RebalanceEvent]]:
    """Fold one group record (type 2, KIP-848 types 3–8 and 16, share 9–15, streams 17–23) into ``snapshot``.

    Takes ownership of ``snapshot`` and updates it in place (copying a large group per
    record would make a batch quadratic); use the returned value. A tombstone clears
    the metadata it deletes and returns the snapshot (counters kept): whether the group
    is gone is the caller's call (no :attr:`~GroupSnapshot.has_metadata` and no
    offsets). Tombstones for state that is not there are ignored and never create a
    group (None in, None out). Share- and streams-group records give the group its
    type, epochs and members (:mod:`streaming.groups.share_streams`), no events.
    Offset commits (types 0/1) are the caller's and rejected here.

    ``last_commit_ms`` maps (topic name, partition) to the group's latest commit time
    on it, as of this record (commits before it in the log); it only feeds
    :func:`~streaming.groups.boundary.classify_departure`. Without it every departure is ``unknown``.
    A KIP-848 group matches those names to its topic ids through its learnt names (see
    :func:`learn_topic_names`). ``consumer_timeouts`` are a KIP-848 group's session timeout and
    heartbeat interval in force (KIP-848 records do not carry them; None: the ones last given, else
    Kafka's defaults); they tell a fenced member from one that left.
    """
    record_type = record.record_type
    if record_type in OFFSET_COMMIT_TYPES:
        raise ValueError("offset commits are kept by the caller, not folded here")
    if record_type not in GROUP_STATE_TYPES:
        return snapshot, []
    if snapshot is None:
        if record.value is None:
            return None, []
        snapshot = GroupSnapshot(group=record.group)
    record_time_ms = int(record_time_ms)
    snapshot.last_seen_ms = max(snapshot.last_seen_ms, record_time_ms)
    if record_type == RecordType.GROUP_METADATA:
        events = apply_classic(snapshot, record.value, record_time_ms, last_commit_ms)
    elif record_type in CONSUMER_GROUP_TYPES:
        events = apply_consumer(snapshot, record, record_time_ms, last_commit_ms, consumer_timeouts)
    else:
        apply_share_streams(snapshot, record, record_time_ms)
        events = []
    return snapshot, events


def drop_expired(snapshot: GroupSnapshot, now_ms: int, ttl_ms: int) -> bool:
    """True when the group has been silent for longer than ``ttl_ms`` and has no members.

    Groups with members are kept however quiet they are: a live group only changes
    through records, and dropping it would hide a stable group's metrics.
    """
    return now_ms - snapshot.last_seen_ms > ttl_ms and not member_keys(snapshot)


def learn_topic_names(snapshot: GroupSnapshot, names: Mapping[str, str]) -> None:
    """Teach a KIP-848 group topic id → name pairs learnt elsewhere (cluster metadata, offset commits).

    Since Kafka 4.1 no group record names a topic, so the group stage calls this with the names
    of the ids each assignment record brings. Only ids the group currently references are kept,
    so the map stays bounded.
    """
    if snapshot.consumer is None:
        return
    referenced = referenced_topic_ids(snapshot)
    for topic_id, name in names.items():
        if topic_id in referenced:
            learn_topic(snapshot, topic_id, name)

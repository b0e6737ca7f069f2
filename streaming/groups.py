"""The group stage, on the driver: committed offsets and group snapshots, folded one batch at a time.

Committed offsets arrive already reduced by the decode stage (one row per group/topic/partition
and task), so their cost here follows distinct partitions, not commits. Group records (classic
group metadata, KIP-848 records) are decoded here, once, and folded in log order with the pure
functions of :mod:`streaming.state`; only groups that had a record in the batch are touched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from decoders import DecodeError, decode
from streaming.batch_input import BatchInput
from streaming.state import GroupSnapshot, GroupSummary, RebalanceEvent, apply_record, drop_expired, summarize

TopicPartition = tuple[str, int]


class CommittedOffset(NamedTuple):
    offset: int
    commit_timestamp_ms: int | None


@dataclass
class GroupOffsets:
    """A group's committed offsets and how many commits it has written."""

    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    commits_total: int = 0
    last_commit_ms: int = 0


@dataclass(frozen=True)
class DeadLetter:
    """An undecodable record, kept with its bytes and where it came from."""

    kafka_partition: int
    kafka_offset: int
    record_time_ms: int | None
    reason: str
    key: bytes | None
    value: bytes | None


@dataclass
class BatchResult:
    """What one batch changed: events, the groups to re-export or forget, offsets that moved."""

    events: list[RebalanceEvent] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    changed_offsets: dict[str, dict[TopicPartition, CommittedOffset | None]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    dead_letters: list[DeadLetter] = field(default_factory=list)


class GroupStage:
    """Every group's snapshot and committed offsets (see the module docstring)."""

    def __init__(self) -> None:
        self.snapshots: dict[str, GroupSnapshot] = {}
        self.offsets: dict[str, GroupOffsets] = {}

    @property
    def groups(self) -> set[str]:
        return self.snapshots.keys() | self.offsets.keys()

    def apply(self, batch: BatchInput) -> BatchResult:
        result = BatchResult()
        self._apply_commits(batch.commits, result)
        self._apply_group_records(batch.group_records, result)
        result.dead_letters.extend(_dead_letters(batch.dead_letters))
        for group in list(result.changed):
            if not self._alive(group):
                self._forget(group, result)
        return result

    def _apply_commits(self, commits: pa.Table, result: BatchResult) -> None:
        if commits.num_rows == 0:
            return
        # Across tasks a key can appear twice only for a topic whose groups span partitions
        # (a replay); the highest (partition, offset) wins, so the result never depends on task order.
        commits = commits.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])
        columns = [commits.column(name).to_pylist() for name in
                   ("group", "topic", "partition", "offset", "commit_timestamp", "record_time_ms", "count")]
        for group, topic, partition, offset, commit_ts, record_ms, count in zip(*columns, strict=True):
            entry = self.offsets.get(group)
            if entry is None:
                entry = self.offsets[group] = GroupOffsets()
            tp = (topic, partition)
            changes = result.changed_offsets.setdefault(group, {})
            if offset is None:
                entry.offsets.pop(tp, None)
                changes[tp] = None
            else:
                entry.offsets[tp] = changes[tp] = CommittedOffset(offset, commit_ts)
            entry.commits_total += count
            entry.last_commit_ms = max(entry.last_commit_ms, record_ms or 0)
            result.changed.add(group)

    def _apply_group_records(self, records: pa.Table, result: BatchResult) -> None:
        if records.num_rows == 0:
            return
        records = records.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])
        columns = [records.column(name).to_pylist() for name in
                   ("group", "raw_key", "raw_value", "record_time_ms", "kafka_partition", "kafka_offset")]
        for group, key, value, record_ms, kafka_partition, kafka_offset in zip(*columns, strict=True):
            record = decode(key, value)
            if isinstance(record, DecodeError):
                result.errors[record.reason] += 1
                result.dead_letters.append(
                    DeadLetter(kafka_partition, kafka_offset, record_ms, record.reason, key, value))
                continue
            snapshot, events = apply_record(self.snapshots.get(group), record, int(record_ms or 0))
            if snapshot is None:
                self.snapshots.pop(group, None)
            else:
                self.snapshots[group] = snapshot
            result.events.extend(events)
            result.changed.add(group)

    def _alive(self, group: str) -> bool:
        snapshot = self.snapshots.get(group)
        offsets = self.offsets.get(group)
        has_metadata = snapshot is not None and (snapshot.classic is not None or snapshot.consumer is not None)
        return has_metadata or (offsets is not None and bool(offsets.offsets))

    def _forget(self, group: str, result: BatchResult) -> None:
        self.snapshots.pop(group, None)
        self.offsets.pop(group, None)
        result.changed.discard(group)
        result.changed_offsets.pop(group, None)
        result.removed.add(group)

    def expire(self, now_ms: int, ttl_ms: int) -> BatchResult:
        """Forget groups without members that wrote nothing for ``ttl_ms``."""
        result = BatchResult()
        for group in list(self.groups):
            snapshot = self._snapshot_for(group)
            offsets = self.offsets.get(group)
            snapshot.last_seen_ms = max(snapshot.last_seen_ms, offsets.last_commit_ms if offsets else 0)
            if drop_expired(snapshot, now_ms, ttl_ms):
                self._forget(group, result)
        return result

    def _snapshot_for(self, group: str) -> GroupSnapshot:
        """The group's snapshot; a group known only by its offsets gets an empty one (not stored)."""
        snapshot = self.snapshots.get(group)
        return snapshot if snapshot is not None else GroupSnapshot(group=group)

    def summary(self, group: str, now_ms: int) -> GroupSummary:
        return summarize(self._snapshot_for(group), now_ms)

    def summaries(self, groups: Iterable[str], now_ms: int) -> list[GroupSummary]:
        return [self.summary(group, now_ms) for group in sorted(groups)]


def _dead_letters(table: pa.Table) -> list[DeadLetter]:
    if table.num_rows == 0:
        return []
    columns = [table.column(name).to_pylist() for name in
               ("kafka_partition", "kafka_offset", "record_time_ms", "error", "raw_key", "raw_value")]
    return [DeadLetter(*row) for row in zip(*columns, strict=True)]

"""The group stage, on the driver: committed offsets and group snapshots, folded one batch at a time.

Committed offsets arrive already reduced by the decode stage (one row per group/topic/partition
and task), so their cost here follows distinct partitions, not commits. Group records (classic
group metadata, KIP-848 records) are decoded here, once, and folded in log order with the pure
functions of :mod:`streaming.groups.fold`; only groups that had a record in the batch are touched.

:class:`StageLimits` bound what a flood of group ids or members can make the driver keep and
export: groups beyond ``--max-groups`` are not tracked, members beyond
``--max-members-per-group`` are left out of a group's member series; both are counted.

KIP-848 records name topics by id, and since Kafka 4.1 no record maps an id to its name; the
stage asks its :class:`~streaming.protocol.ClusterFacts` (cached cluster metadata) for the names
before a record that may need them (a completed assignment, whose departures are matched with
commits by topic name) and before handing a group's assignments over. An id without a name (a
deleted topic) is left out of the assignments: it is never shown or polled as if it were a topic.
No record carries a KIP-848 group's session timeout and heartbeat interval either: the stage asks
for those of the batch's KIP-848 groups once per batch.

What the cluster answered is part of a batch's input: the stage keeps it (:class:`FactsUsed`: the
names and timeouts a batch's folds were given, and the names learnt while handing groups over
since the batch before) for the state store to write beside the batch, and a replay is given the
same answers (:meth:`GroupStage.apply` with ``recorded``), whatever the cluster says by then. Within
a batch the first answer for a topic id holds for the whole batch, so the answers recorded are all
a replay needs.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from decoders import DecodeError, decode
from decoders.folding import fold_record
from decoders.reader import uuid_text
from decoders.records import CONSUMER_GROUP_TYPES, RecordType
from streaming.groups.boundary import CHURN_WINDOW_MS
from streaming.groups.config import GroupsConfig
from streaming.groups.fold import apply_record, drop_expired, learn_topic_names
from streaming.groups.model import GroupSnapshot, referenced_topic_ids
from streaming.groups.offsets import PartitionOffsets
from streaming.groups.summary import DEFAULT_ABANDONED_AFTER_MS, summarize
from streaming.protocol import (
    ACTIVE,
    INACTIVE,
    BatchInput,
    BatchResult,
    ClusterFacts,
    DeadLetter,
    GroupChange,
    GroupSummary,
    GroupTimeouts,
    TopicPartition,
)
from streaming.pylists import pylist, pylists

# KIP-848 records at which the group's topic names are needed: they can complete an assignment
# (type 6) or empty the group (type 3), and a departure is told by its last commit, kept by name.
_NAMES_NEEDED = (RecordType.CONSUMER_GROUP_METADATA, RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
# Rows of a batch's commits turned into Python objects at a time (see GroupStage._apply_commits).
COMMIT_CHUNK_ROWS = 1 << 16
# A group without members is summarised again by commits alone once its latest commit is this much newer than the
# one its last summary showed: its last commit series is right to a minute, at one summary a minute at most.
SHOWN_COMMIT_SLACK_MS = 60_000
# Stale entries the abandoned deadlines' heap may hold beyond twice the deadlines in force before it is rebuilt.
STALE_DEADLINES_KEPT = 1024


@dataclass(slots=True)
class GroupOffsets:
    """A group's committed offsets and how many commits it has written."""

    offsets: PartitionOffsets = field(default_factory=PartitionOffsets)
    commits_total: int = 0
    last_commit_ms: int = 0


@dataclass
class FactsUsed:
    """What the cluster told the stage for one batch (see the module docstring): ``learnt`` names taught
    to groups' snapshots before the batch (handing them over), ``names`` the topic names its folds were
    given, ``timeouts`` the KIP-848 groups' timeouts in force."""

    learnt: dict[str, dict[str, str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    timeouts: dict[str, GroupTimeouts] = field(default_factory=dict)


@dataclass(frozen=True)
class StageLimits:
    """What the group stage keeps at most (None: no limit); see the module docstring."""

    max_groups: int | None = None
    max_members_per_group: int | None = None
    # Undecodable group records kept per batch: the dead-letter log keeps no more than its own
    # bound, so a batch of bad records must not build a list the size of the batch first.
    dead_letters: int = 1000
    # Not a limit, but the stage's other setting from GroupsConfig: when a group without members is
    # abandoned (streaming.groups.summary.activity).
    abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS

    @classmethod
    def from_config(cls, config: GroupsConfig, dead_letters: int) -> StageLimits:
        return cls(config.max_groups, config.max_members_per_group, dead_letters,
                   int(config.abandoned_after_seconds * 1000))


class GroupStage:
    """Every group's snapshot and committed offsets (see the module docstring)."""

    def __init__(self, limits: StageLimits | None = None, facts: ClusterFacts | None = None) -> None:
        self.snapshots: dict[str, GroupSnapshot] = {}
        self.facts = facts
        self.offsets: dict[str, GroupOffsets] = {}
        self.limits = limits or StageLimits()
        self.groups_dropped = 0  # groups the last batch with records turned away (--max-groups)
        self.members_dropped: dict[str, int] = {}  # group -> member series left out (--max-members-per-group)
        self._limit_hits: Counter[str] = Counter()
        # Groups a change with a summary was handed over for since this stage was built, and whether that
        # summary showed member churn: the others' first change is whole, whatever moved.
        self._whole: dict[str, bool] = {}
        # What the cluster told the last batch (FactsUsed), and names taught since (the next batch's learnt).
        self._used = FactsUsed()
        self._learnt: dict[str, dict[str, str]] = {}
        # The batch being folded: its answers so far (None: asked, no name) and whether they are a replay's.
        self._names: dict[str, str | None] = {}
        self._timeouts: dict[str, GroupTimeouts] = {}
        self._replaying = False
        # The activity and last commit each group's last summary showed, and when an inactive one turns abandoned
        # if nothing happens (a heap of (deadline, group); an entry whose deadline is no longer the group's is stale).
        self._activity: dict[str, tuple[str, int]] = {}
        self._abandon_at: dict[str, int] = {}
        self._deadlines: list[tuple[int, str]] = []

    @property
    def groups(self) -> set[str]:
        return self.snapshots.keys() | self.offsets.keys()

    def apply(self, batch: BatchInput, recorded: FactsUsed | None = None) -> BatchResult:
        """Fold one batch; ``recorded``: what the cluster told it when it ran (a replay), else the
        cluster is asked (see the module docstring)."""
        result = BatchResult()
        commits, records = self._within_group_limit(batch.commits, batch.group_records)
        self._begin(records, recorded)
        try:
            self.apply_batch(commits, records, result)
        finally:
            self._replaying = False
            self._names, self._timeouts = {}, {}
        result.dead_letters.extend(_dead_letters(batch.dead_letters))
        # The decode stage counted folded records by their key alone; one whose value turns out
        # undecodable here is an error, not a record read.
        for record_type, count in result.undecodable.items():
            if batch.records[record_type]:
                batch.records[record_type] -= count
        for group in list(result.changed):
            if not self._alive(group):
                self._forget(group, result)
        return result

    def _within_group_limit(self, commits: pa.Table, records: pa.Table) -> tuple[pa.Table, pa.Table]:
        """The batch without the rows of new groups that would take the stage past ``max_groups``.

        Room goes to new groups in name order, so a replay of the batch admits the same ones.
        """
        limit = self.limits.max_groups
        if limit is None or commits.num_rows + records.num_rows == 0:
            return commits, records
        seen = set(pylist(pc.unique(commits.column("group")))) | set(pylist(pc.unique(records.column("group"))))
        new = sorted(seen - self.snapshots.keys() - self.offsets.keys())
        room = max(0, limit - len(self.groups))
        turned_away = new[room:]
        self.groups_dropped = len(turned_away)
        if not turned_away:
            return commits, records
        self._limit_hits["max_groups"] += len(turned_away)
        dropped = pa.array(turned_away, pa.string())
        return (commits.filter(pc.invert(pc.is_in(commits.column("group"), value_set=dropped))),
                records.filter(pc.invert(pc.is_in(records.column("group"), value_set=dropped))))

    def _begin(self, records: pa.Table, recorded: FactsUsed | None) -> None:
        """Start a batch's facts: a replay's recorded ones, else the timeouts of its KIP-848 groups, asked
        at once (a first load asks for thousands of groups in a few requests)."""
        if recorded is not None:
            self._replaying = True
            for group, names in recorded.learnt.items():
                snapshot = self.snapshots.get(group)
                if snapshot is not None:
                    learn_topic_names(snapshot, names)
            self._names = dict(recorded.names)
            self._timeouts = dict(recorded.timeouts)
            self._used = FactsUsed(recorded.learnt, dict(recorded.names), dict(recorded.timeouts))
            if self.facts is not None:  # the cache serves the batches after the replay
                self.facts.learn({**recorded.names, **{t: n for names in recorded.learnt.values()
                                                       for t, n in names.items()}})
            return
        self._used, self._learnt = FactsUsed(learnt=self._learnt), {}
        if self.facts is None or records.num_rows == 0 or "record_type" not in records.column_names:
            return
        kip848 = records.filter(pc.is_in(records.column("record_type"),
                                         value_set=pa.array(sorted(CONSUMER_GROUP_TYPES), pa.int16())))
        groups = pylist(pc.unique(kip848.column("group")))
        if groups:
            self._timeouts = self.facts.consumer_group_timeouts(groups)
            self._used.timeouts.update(self._timeouts)

    def _group_timeouts(self, group: str) -> GroupTimeouts | None:
        """The group's timeouts for this batch (asked for now when the batch's rows did not say its type)."""
        found = self._timeouts.get(group)
        if found is None and not self._replaying and self.facts is not None:
            found = self.facts.consumer_group_timeouts([group]).get(group)
            if found is not None:
                self._timeouts[group] = self._used.timeouts[group] = found
        return found

    def _batch_names(self, topic_ids: set[str]) -> dict[str, str]:
        """Names of ``topic_ids`` for this batch's folds: the first answer for an id holds for the batch."""
        unknown = topic_ids - self._names.keys()
        if unknown and not self._replaying and self.facts is not None:
            found = self.facts.topic_names(unknown)
            for topic_id in unknown:
                self._names[topic_id] = found.get(topic_id)
            self._used.names.update(found)
        return {t: name for t in topic_ids if (name := self._names.get(t)) is not None}

    def take_facts_used(self) -> FactsUsed:
        """What the cluster told the last batch, for the state store to write beside it (once)."""
        used, self._used = self._used, FactsUsed()
        return used

    def take_limit_hits(self) -> Counter[str]:
        """Limit hits since the last call, by limit (for ``rebalance_monitor_limit_hits_total``)."""
        hits, self._limit_hits = self._limit_hits, Counter()
        return hits

    def _learn_topic_ids(self, commits: pa.Table) -> None:
        """Hand the topic id → name pairs the batch's commits carry to the cluster facts (distinct
        pairs, found by Arrow: a batch of commits costs a handful of them)."""
        if self.facts is None or commits.num_rows == 0 or "topic_id" not in commits.column_names:
            return
        carried = commits.select(["topic_id", "topic"]).filter(pc.is_valid(commits.column("topic_id")))
        if carried.num_rows:
            pairs = carried.group_by(["topic_id", "topic"], use_threads=False).aggregate([])
            self.facts.learn({uuid_text(topic_id): topic for topic_id, topic in zip(
                pairs.column("topic_id").to_pylist(), pairs.column("topic").to_pylist(), strict=True)})

    def _apply_commits(self, commits: pa.Table, result: BatchResult) -> None:
        """Apply reduced commits that no group record of the batch comes after (see :meth:`apply_batch`).

        Counters are aggregated per group in Arrow; only the offsets themselves are set per row.
        """
        if commits.num_rows == 0:
            return
        # Across tasks a key can appear twice only for a topic whose groups span partitions
        # (a replay); the highest (partition, offset) wins, so the result never depends on task order.
        commits = commits.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])
        per_group = commits.group_by("group", use_threads=False).aggregate(
            [("count", "sum"), ("record_time_ms", "max")])
        for group, count, last_ms in zip(*pylists(per_group, ("group", "count_sum", "record_time_ms_max")),
                                         strict=True):
            entry = self.offsets.get(group)
            if entry is None:
                entry = self.offsets[group] = GroupOffsets()
            entry.commits_total += count
            entry.last_commit_ms = max(entry.last_commit_ms, last_ms or 0)
            result.changed.add(group)
        offsets = self.offsets
        # A slice at a time: the whole batch as Python objects (five per commit, about 95 bytes a row)
        # came on top of every group's state (52 MiB for 550,000 rows; 5 MiB in slices).
        for chunk in commits.select(["group", "topic", "partition", "offset", "commit_timestamp"]).to_batches(
                max_chunksize=COMMIT_CHUNK_ROWS):
            for group, topic, partition, offset, commit_ts in zip(*pylists(chunk, chunk.schema.names),
                                                                   strict=True):
                if offset is None:
                    offsets[group].offsets.discard(topic, partition)
                else:
                    offsets[group].offsets.set(topic, partition, offset, commit_ts)

    def _commit(self, result: BatchResult, group: str, tp: TopicPartition, offset: int | None,
                commit_ts: int | None, record_ms: int | None, count: int) -> None:
        """One commit, in log order among a group's records."""
        entry = self.offsets.get(group)
        if entry is None:
            entry = self.offsets[group] = GroupOffsets()
        if offset is None:
            entry.offsets.discard(*tp)
        else:
            entry.offsets.set(*tp, offset, commit_ts)
        entry.commits_total += count
        entry.last_commit_ms = max(entry.last_commit_ms, record_ms or 0)
        result.changed.add(group)

    def apply_batch(self, commits: pa.Table, records: pa.Table, result: BatchResult) -> None:
        """Commits and group records in log order: a record sees the commits written before it.

        Departures are inferred from the time of each member's last commit (see
        :func:`streaming.groups.fold.apply_record`). Commits arrive reduced to the latest per partition
        between two of the group's records (:func:`streaming.decode.stage.latest_commits`), so each record sees
        the latest commit written before it, however many records and commits a batch holds.
        """
        self._learn_topic_ids(commits)
        if records.num_rows == 0:
            self._apply_commits(commits, result)
            return
        # Only a commit written before its group's last record in this batch has to be interleaved;
        # every other commit is applied afterwards on the plain path (nothing after it reads it).
        last_record = records.group_by("group").aggregate([("kafka_offset", "max")])
        joined = commits.join(last_record, "group", join_type="left outer")
        before = pc.fill_null(pc.less(joined.column("kafka_offset"), joined.column("kafka_offset_max")), False)
        early = joined.filter(before)
        interleaved: dict[str, list[tuple[int, int, int, tuple]]] = {}
        for row in zip(*pylists(early, (
                "group", "kafka_partition", "kafka_offset", "topic", "partition", "offset", "commit_timestamp",
                "record_time_ms", "count")), strict=True):
            interleaved.setdefault(row[0], []).append((row[1], row[2], 0, row))
        # A record's decoded text is taken from Arrow as it is folded, not all at once (about 1 KB a
        # group record: 100 MB of strings held together at a first load of 100,000 groups).
        decoded = records.column("decoded").combine_chunks()
        for row in zip(*pylists(records, (
                "group", "kafka_partition", "kafka_offset", "raw_key", "raw_value", "record_time_ms")),
                range(records.num_rows), strict=True):
            interleaved.setdefault(row[0], []).append((row[1], row[2], 1, row))
        for group, items in interleaved.items():
            for _, _, kind, row in sorted(items, key=lambda item: item[:3]):
                if kind == 0:
                    _, _, _, topic, partition, offset, commit_ts, record_ms, count = row
                    self._commit(result, group, (topic, partition), offset, commit_ts, record_ms, count)
                else:
                    _, kafka_partition, kafka_offset, key, value, record_ms, index = row
                    self._fold(result, group, kafka_partition, kafka_offset, key, value, record_ms,
                               decoded[index].as_py())
        self._apply_commits(joined.filter(pc.invert(before)), result)

    def _fold(self, result: BatchResult, group: str, kafka_partition: int, kafka_offset: int, key: bytes,
              value: bytes | None, record_ms: int | None, decoded: str | None) -> None:
        # The decode stage decoded the record already; deltas written before it did are decoded here.
        record = fold_record(decoded) if decoded is not None else decode(key, value)
        if isinstance(record, DecodeError):
            result.errors[record.reason] += 1
            result.undecodable[int.from_bytes(key[:2], "big", signed=True)] += 1  # the key was read
            if len(result.dead_letters) < self.limits.dead_letters:
                result.dead_letters.append(DeadLetter(kafka_partition, kafka_offset, record_ms, record.reason, key,
                                                      value))
            return
        offsets = self.offsets.get(group)
        commit_times = offsets.offsets.commit_times() if offsets is not None else None
        snapshot, timeouts = self.snapshots.get(group), None
        if record.record_type in CONSUMER_GROUP_TYPES:
            timeouts = self._group_timeouts(group)
            if snapshot is not None and snapshot.consumer is not None and record.record_type in _NAMES_NEEDED:
                missing = referenced_topic_ids(snapshot) - snapshot.topic_names.keys()
                if missing:
                    learn_topic_names(snapshot, self._batch_names(missing))
        snapshot, events = apply_record(snapshot, record, int(record_ms or 0), commit_times, timeouts)
        if snapshot is None:
            self.snapshots.pop(group, None)
        else:
            self.snapshots[group] = snapshot
        result.events.extend(events)
        result.changed.add(group)
        result.folded.add(group)

    def _alive(self, group: str) -> bool:
        snapshot = self.snapshots.get(group)
        offsets = self.offsets.get(group)
        return (snapshot is not None and snapshot.has_metadata) or (offsets is not None and bool(offsets.offsets))

    def forget(self, groups: Iterable[str]) -> None:
        """Drop groups outright (expiry replayed from a delta)."""
        for group in groups:
            self.snapshots.pop(group, None)
            self.offsets.pop(group, None)
            self.members_dropped.pop(group, None)
            self._whole.pop(group, None)
            self._activity.pop(group, None)
            self._abandon_at.pop(group, None)

    def _forget(self, group: str, result: BatchResult) -> None:
        self.snapshots.pop(group, None)
        self.offsets.pop(group, None)
        self.members_dropped.pop(group, None)
        self._whole.pop(group, None)
        self._activity.pop(group, None)
        self._abandon_at.pop(group, None)
        result.changed.discard(group)
        result.folded.discard(group)
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

    def _name_topics(self, snapshot: GroupSnapshot) -> None:
        """Learn the names of the KIP-848 topic ids the group references and has no name for, between
        batches (kept for the next batch's :class:`FactsUsed`: a replay teaches them at the same point)."""
        if self.facts is None or snapshot.consumer is None:
            return
        missing = referenced_topic_ids(snapshot) - snapshot.topic_names.keys()
        if missing:
            names = self.facts.topic_names(missing)
            learn_topic_names(snapshot, names)
            if names:
                self._learnt.setdefault(snapshot.group, {}).update(names)

    def assignments(self, group: str) -> dict[str, list[TopicPartition]]:
        """Each member's (owner key's) assigned partitions by topic name: what member lag sums over.

        A KIP-848 topic id without a known name is left out (see the module docstring)."""
        snapshot = self.snapshots.get(group)
        if snapshot is None:
            return {}
        if snapshot.classic is not None:
            return {m.owner: [(topic, p) for topic, parts in sorted(m.assigned.items()) for p in parts]
                    for m in snapshot.classic.members}
        if snapshot.consumer is None:
            return {}
        self._name_topics(snapshot)
        names = snapshot.topic_names
        return {m.owner: sorted((names[topic], p) for topic, parts in (m.current.assigned if m.current else {}).items()
                                if topic in names for p in parts)
                for m in snapshot.consumer.members.values()}

    def changes(self, result: BatchResult, now_ms: int) -> list[GroupChange]:
        """One change per group the batch changed, in group order (see :meth:`change`), and a whole one for each
        group whose time to be called abandoned came without anything else changing it (:meth:`_turning`)."""
        turning = self._turning(now_ms) - result.changed - result.removed
        return [self.change(group, now_ms, whole=group in result.folded or group in turning)
                for group in sorted(result.changed | turning)]

    def _turning(self, now_ms: int) -> set[str]:
        """Inactive groups whose ``--abandoned-after`` has run out by ``now_ms``: nothing wrote for them, so
        only the clock changes their activity (series are rendered when a group changes, never at a scrape)."""
        due: set[str] = set()
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            deadline, group = heapq.heappop(self._deadlines)
            if self._abandon_at.get(group) == deadline:
                del self._abandon_at[group]
                if group in self.snapshots or group in self.offsets:
                    due.add(group)
        return due

    def change(self, group: str, now_ms: int, whole: bool = True) -> GroupChange:
        """What the driver renders for ``group``: with its summary and assignments when ``whole`` (a group
        record was folded) or when more than commits can have moved (see :meth:`_may_move`)."""
        offsets = self.offsets.get(group) or GroupOffsets()
        committed = offsets.offsets.committed()
        if not whole and not self._may_move(group, now_ms):
            return GroupChange(group, None, committed, offsets.commits_total, offsets.last_commit_ms)
        summary = self.summary(group, now_ms)
        self._whole[group] = bool(summary.member_churn)
        self._shown(group, summary.activity, summary.last_member_ms, summary.last_commit_ms)
        return GroupChange(group, summary, committed, offsets.commits_total, offsets.last_commit_ms,
                           self.assignments(group))

    def _shown(self, group: str, activity: str, last_member_ms: int | None, last_commit_ms: int | None) -> None:
        """Remember the activity a summary showed and, for an inactive group, when it turns abandoned."""
        self._activity[group] = (activity, last_commit_ms or 0)
        if activity != INACTIVE:
            self._abandon_at.pop(group, None)
            return
        deadline = max(last_member_ms or 0, last_commit_ms or 0) + self.limits.abandoned_after_ms + 1
        if self._abandon_at.get(group) != deadline:
            self._abandon_at[group] = deadline
            heapq.heappush(self._deadlines, (deadline, group))
            if len(self._deadlines) > 2 * len(self._abandon_at) + STALE_DEADLINES_KEPT:
                # Each shown commit of an inactive group leaves its previous deadline stale until that comes due
                # (--abandoned-after, a day): rebuilt from the deadlines in force, the heap stays bounded by the groups.
                self._deadlines = [(at, g) for g, at in self._abandon_at.items()]
                heapq.heapify(self._deadlines)

    def _may_move(self, group: str, now_ms: int) -> bool:
        """Whether a group changed by commits alone still needs a summary: none was handed over yet, member
        churn was shown in the last one or a member change is inside its window now (the window slides),
        the group had no members and its latest commit is :data:`SHOWN_COMMIT_SLACK_MS` newer than the one
        shown (its last commit series, and an abandoned group a commit makes inactive), or a KIP-848 topic id
        has no name yet (the cluster may know it by now)."""
        churning = self._whole.get(group)
        if churning is None or churning:
            return True
        shown, shown_commit = self._activity.get(group, (ACTIVE, 0))
        offsets = self.offsets.get(group)
        if shown != ACTIVE and offsets is not None and offsets.last_commit_ms - shown_commit > SHOWN_COMMIT_SLACK_MS:
            return True
        snapshot = self.snapshots.get(group)
        if snapshot is None:
            return False
        return any(t > now_ms - CHURN_WINDOW_MS for t, _, _ in snapshot.churn) or (
            snapshot.consumer is not None and bool(referenced_topic_ids(snapshot) - snapshot.topic_names.keys()))

    def summary(self, group: str, now_ms: int) -> GroupSummary:
        """The group's summary; past ``max_members_per_group`` only the first members by owner key
        are listed (what the member series come from), ``member_count`` stays the true count."""
        snapshot = self._snapshot_for(group)
        self._name_topics(snapshot)  # assigned topics are named ones
        offsets = self.offsets.get(group)
        summary = summarize(snapshot, now_ms, offsets.last_commit_ms if offsets else None,
                            self.limits.abandoned_after_ms)
        limit = self.limits.max_members_per_group
        if limit is None or len(summary.members) <= limit:
            self.members_dropped.pop(group, None)
            return summary
        self.members_dropped[group] = len(summary.members) - limit
        self._limit_hits["max_members_per_group"] += 1
        return replace(summary, members=tuple(sorted(summary.members, key=lambda m: m.member)[:limit]))


def _dead_letters(table: pa.Table) -> list[DeadLetter]:
    if table.num_rows == 0:
        return []
    columns = pylists(table, ("kafka_partition", "kafka_offset", "record_time_ms", "error", "raw_key", "raw_value"))
    return [DeadLetter(*row) for row in zip(*columns, strict=True)]

"""Lag series: per partition, per topic, per group and per member, re-rendered as log ends are polled.

:class:`LagSeries` keeps what lag is computed over (each group's committed offsets and its
members' partitions, handed over by the sink when a group changes), tells the
:class:`~streaming.lag.tracker.LagTracker` which partitions to poll, and renders the lag
series into the exporter's cache: for a group when it changes, and from its own thread after
every poll round and often enough that a series whose log-end sample goes stale leaves the
next scrape. :meth:`LagSeries.text` renders the log ends and the poller's health at scrape time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from streaming.lag.tracker import LagTracker
from streaming.metrics.exporter import Exporter
from streaming.metrics.exposition import Family, Lines
from streaming.protocol import GroupSummary, TopicPartition

G, C = "gauge", "counter"
MemberLabels = tuple[tuple[str, str], ...]

LAG_FAMILIES = (
    Family("kafka_consumergroup_partition_lag", G,
           "Records between the committed offset and the log end; --lag-granularity partition only."),
    Family("kafka_consumergroup_partition_lag_seconds", G,
           "Seconds since the record at the committed offset (the next one the group reads) was written; "
           "method=timestamp read from that record, interpolated where it is gone; --lag-granularity partition only."),
    Family("kafka_consumergroup_topic_total_lag", G, "Sum of the group's lag over a topic's partitions."),
    Family("kafka_consumergroup_topic_max_lag", G, "Largest lag of the group on one partition of a topic."),
    Family("kafka_consumergroup_topic_max_lag_seconds", G, "Largest lag in seconds of the group on a topic."),
    Family("kafka_consumergroup_total_lag", G, "Sum of the group's lag over every partition it committed."),
    Family("kafka_consumergroup_max_lag", G, "Largest lag of the group on one partition."),
    Family("kafka_consumergroup_max_lag_seconds", G, "Largest lag in seconds of the group on one partition."),
    Family("kafka_consumergroup_partition_lag_uncommitted", G,
           "Assigned partition the group never committed: log end minus log start (what an earliest-reset "
           "consumer has to read); --lag-granularity partition only."),
    Family("kafka_consumergroup_member_lag", G,
           "Sum of the lag of the partitions one member owns (uncommitted ones from the log start)."),
    Family("kafka_consumergroup_member_lag_seconds", G, "Largest lag in seconds among one member's partitions."),
    Family("kafka_consumergroup_lag_truncations_total", C,
           "Commits found beyond the log end by a sample taken after the commit (the log was truncated); "
           "the lag series shows 0 for them."),
)
LOG_END_FAMILY = Family("kafka_topic_partition_log_end_offset", G,
                        "Latest sampled log-end offset of a partition some group commits to or is assigned.")
POLL_TIMESTAMP_FAMILY = Family("rebalance_monitor_log_end_poll_timestamp_seconds", G,
                               "When the lag poller last fetched log offsets; lag series go once it is stale.")
POLL_ERRORS_FAMILY = Family("rebalance_monitor_log_end_poll_errors_total", C,
                            "Lag poller failures by reason (a partition or a whole round).")
OFFSETS_TOPIC_GAP_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_offsets", G,
                                  "High watermark minus last stable offset of an offsets-topic partition: records "
                                  "a read_committed reader (this job) cannot see yet because a transaction is open.")
OFFSETS_TOPIC_STUCK_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_seconds", G,
                                    "How long an offsets-topic partition's last stable offset has been held back.")
_F = {f.name: f for f in LAG_FAMILIES}
LAG_NAMES = tuple(_F)


def member_partitions(summary: GroupSummary, assignments: Mapping[str, Sequence[TopicPartition]] | None
                      ) -> dict[MemberLabels, list[TopicPartition]]:
    """Each listed member's labels and partitions (owner keys the summary leaves out are dropped)."""
    members = {m.member: (("member", m.member), ("client_id", m.client_id), ("client_host", m.client_host))
               for m in summary.members}
    return {members[owner]: list(parts) for owner, parts in (assignments or {}).items() if owner in members}


class LagSeries:
    """Lag series of every group, rendered into ``exporter``; a component (see :mod:`streaming.lifecycle`).

    ``on_refresh`` callbacks run after each refresh with its time (the job's input lag reads
    the same log ends).
    """

    name = "lag-series"

    def __init__(self, cluster: str, tracker: LagTracker, exporter: Exporter, per_partition: bool = True,
                 on_refresh: Sequence[Callable[[float], None]] = ()) -> None:
        self.cluster = cluster
        self.lag = tracker
        self.exporter = exporter
        self.per_partition = per_partition
        self._on_refresh = list(on_refresh)
        self._lock = threading.Lock()
        self._offsets: dict[str, dict[TopicPartition, int]] = {}
        self._owned: dict[str, dict[MemberLabels, list[TopicPartition]]] = {}
        self._truncated: dict[str, set[tuple[TopicPartition, int]]] = {}
        self._truncations: dict[str, dict[str, int]] = {}
        self._has_lag: set[str] = set()  # groups whose cached text holds lag lines
        self._batch_active = threading.Event()  # a batch is being folded: the refresh waits
        self._wanted_dirty = True  # the tracker's wanted partitions need a new set_wanted
        self._log_end_text = b""
        self._rendered_at = 0.0
        self._round: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the batch thread -----------------------------------------------------------

    def update(self, group: str, committed: Mapping[TopicPartition, int],
               owned: Mapping[MemberLabels, list[TopicPartition]]) -> None:
        """A group changed: keep what its lag is computed over and render its lag series."""
        committed, owned = dict(committed), dict(owned)
        with self._lock:
            if committed != self._offsets.get(group) or owned != self._owned.get(group):
                self._wanted_dirty = True
            self._offsets[group] = committed
            self._owned[group] = owned
            self._render(group)

    def remove(self, group: str) -> None:
        """Forget a deleted or expired group."""
        with self._lock:
            for state in (self._offsets, self._owned, self._truncated, self._truncations):
                state.pop(group, None)
            self._has_lag.discard(group)
            self._wanted_dirty = True

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around a batch's fold: the refresh waits rather than contend for the lock and the GIL
        (at 100,000 groups the two threads handing the lock back and forth doubled the fold)."""
        self._batch_active.set()
        try:
            yield
        finally:
            self._batch_active.clear()

    # -- the refresh ------------------------------------------------------------------

    def refresh(self, now: float | None = None) -> None:
        """Tell the tracker what to poll and re-render the lag series that can have changed.

        Groups none of whose partitions has a sample, and which show no lag now, are skipped.
        """
        now = time.time() if now is None else now
        with self._lock:
            wanted = None
            if self._wanted_dirty:
                committed = {(t, p, o) for offsets in self._offsets.values() for (t, p), o in offsets.items()}
                uncommitted = {tp for group, owned in self._owned.items() for parts in owned.values() for tp in parts
                               if tp not in self._offsets.get(group, {})}
                wanted = committed, uncommitted
                self._wanted_dirty = False
        if wanted is not None:
            self.lag.set_wanted(*wanted)
        sampled = self.lag.sampled_at()
        with self._lock:
            groups = list(self._offsets.items())
        for group, offsets in groups:
            # The lock is taken per group: a batch's updates interleave instead of waiting for a
            # whole pass over every partition.
            with self._lock:
                if self._offsets.get(group) is not offsets:
                    continue  # changed or removed meanwhile: update rendered it afresh
                owned = self._owned.get(group, {})
                if group not in self._has_lag and not any(tp in sampled for tp in offsets) and not any(
                        tp in sampled for parts in owned.values() for tp in parts):
                    continue
                self._render(group)
        with self._lock:
            ends = Lines(self.cluster)
            grouped = {tp for offsets in self._offsets.values() for tp in offsets}
            grouped.update(tp for owned in self._owned.values() for parts in owned.values() for tp in parts)
            for topic, partition in sorted(tp for tp in grouped if tp in sampled):
                found = self.lag.lag_uncommitted(topic, partition)
                if found is not None:
                    ends.add(LOG_END_FAMILY, (("topic", topic), ("partition", str(partition))), found.log_end)
            self._log_end_text = ends.encoded().get(LOG_END_FAMILY.name, b"")
            self._rendered_at, self._round = now, self.lag.last_round_at()
        for callback in self._on_refresh:
            callback(now)

    def _loop(self, period_s: float) -> None:
        while not self._stop.wait(1.0):
            if self._batch_active.is_set():
                continue
            now = time.time()
            if self.lag.last_round_at() != self._round or now - self._rendered_at >= period_s:
                self.refresh(now)

    def start(self) -> None:
        """Re-render after every poll round and at least every third of the staleness limit."""
        period = max(1.0, self.lag.stale_after_s / 3)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(period,), daemon=True, name="lag-render")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    # -- scrape time ------------------------------------------------------------------

    def text(self) -> bytes:
        """The log ends, the poller's health and the offsets topic's open transactions."""
        lines = Lines(self.cluster)
        last_round = self.lag.last_round_at()
        for reason, count in sorted(self.lag.errors().items()):
            lines.add(POLL_ERRORS_FAMILY, (("reason", reason),), count)
        for partition, gap in sorted(self.lag.offsets_topic_gaps().items()):
            labels = (("partition", str(partition)),)
            lines.add(OFFSETS_TOPIC_GAP_FAMILY, labels, gap.gap)
            if gap.stuck_since is not None:
                lines.add(OFFSETS_TOPIC_STUCK_FAMILY, labels, max(0.0, time.time() - gap.stuck_since))
        text = lines.encoded()
        with self._lock:
            chunks = [LOG_END_FAMILY.header, self._log_end_text, POLL_TIMESTAMP_FAMILY.header]
        if last_round is not None:
            chunks.append(f'{POLL_TIMESTAMP_FAMILY.name}{{{lines.prefix}}} {last_round!r}\n'.encode())
        for family in (POLL_ERRORS_FAMILY, OFFSETS_TOPIC_GAP_FAMILY, OFFSETS_TOPIC_STUCK_FAMILY):
            chunks += [family.header, text.get(family.name, b"")]
        return b"".join(chunks)

    # -- rendering (under the lock) -------------------------------------------------------

    def _render(self, group: str) -> None:
        lines = Lines(self.cluster)
        self._lag_lines(lines, group, self._offsets[group])
        self.exporter.put(group, lines, LAG_NAMES)

    def _lag_lines(self, lines: Lines, group: str, committed: Mapping[TopicPartition, int]) -> None:
        """Per-partition lag (partition granularity), per-topic / per-group aggregates, member lag.

        A partition without a fresh log-end sample has no lag series (never a stale number).
        """
        found: dict[TopicPartition, tuple[int, float | None]] = {}
        per_topic: dict[str, list[tuple[int, float | None]]] = {}
        for (topic, partition), offset in sorted(committed.items()):
            lag = self.lag.lag(topic, partition, offset)
            if lag is None:
                continue
            if lag.truncated:
                self._count_truncation(group, topic, ((topic, partition), offset))
            found[(topic, partition)] = (max(0, lag.lag), lag.seconds)
            per_topic.setdefault(topic, []).append(found[(topic, partition)])
            if self.per_partition:
                labels = (("group", group), ("topic", topic), ("partition", str(partition)))
                lines.add(_F["kafka_consumergroup_partition_lag"], labels, max(0, lag.lag))
                if lag.seconds is not None:
                    lines.add(_F["kafka_consumergroup_partition_lag_seconds"],
                              (*labels, ("method", lag.seconds_method or "")), lag.seconds)
        owned = self._owned.get(group, {})
        for parts in owned.values():
            for topic, partition in parts:
                if (topic, partition) in committed or (topic, partition) in found:
                    continue
                lag = self.lag.lag_uncommitted(topic, partition)
                if lag is None:
                    continue
                found[(topic, partition)] = (max(0, lag.lag), None)
                if self.per_partition:
                    lines.add(_F["kafka_consumergroup_partition_lag_uncommitted"],
                              (("group", group), ("topic", topic), ("partition", str(partition))), max(0, lag.lag))
        everything: list[tuple[int, float | None]] = []
        for topic, rows in per_topic.items():
            _aggregates(lines, (("group", group), ("topic", topic)), rows, "kafka_consumergroup_topic_")
            everything.extend(rows)
        if everything:
            _aggregates(lines, (("group", group),), everything, "kafka_consumergroup_")
        for member_labels, parts in owned.items():
            rows = [found[tp] for tp in parts if tp in found]
            if rows:
                member: MemberLabels = (("group", group), *member_labels)
                lines.add(_F["kafka_consumergroup_member_lag"], member, sum(lag for lag, _ in rows))
                seconds = [s for _, s in rows if s is not None]
                if seconds:
                    lines.add(_F["kafka_consumergroup_member_lag_seconds"], member, max(seconds))
        for topic, count in sorted(self._truncations.get(group, {}).items()):
            lines.add(_F["kafka_consumergroup_lag_truncations_total"], (("group", group), ("topic", topic)), count)
        if found:
            self._has_lag.add(group)
        else:
            self._has_lag.discard(group)

    def _count_truncation(self, group: str, topic: str, commit: tuple[TopicPartition, int]) -> None:
        """Once per commit found truncated, however many renders see it."""
        seen = self._truncated.setdefault(group, set())
        if commit not in seen:
            seen.add(commit)
            by_topic = self._truncations.setdefault(group, {})
            by_topic[topic] = by_topic.get(topic, 0) + 1


def _aggregates(lines: Lines, labels: tuple[tuple[str, str], ...], rows: list[tuple[int, float | None]],
                prefix: str) -> None:
    lags = [lag for lag, _ in rows]
    lines.add(_F[f"{prefix}total_lag"], labels, sum(lags))
    lines.add(_F[f"{prefix}max_lag"], labels, max(lags))
    seconds = [s for _, s in rows if s is not None]
    if seconds:
        lines.add(_F[f"{prefix}max_lag_seconds"], labels, max(seconds))

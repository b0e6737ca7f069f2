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
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from streaming.lag.health import HealthWindows
from streaming.lag.retention import LostRecords, margin
from streaming.lag.tracker import LagTracker
from streaming.lifecycle import PollingThread
from streaming.metrics import compat
from streaming.metrics.exporter import Exporter
from streaming.metrics.exposition import Family, Lines
from streaming.metrics.groups import MemberLabels, member_labels
from streaming.metrics.live import HEALTH, RETENTION_FAMILIES, retention_lines
from streaming.protocol import GroupSummary, TopicPartition

log = logging.getLogger(__name__)

G, C = "gauge", "counter"
# When fetching log ends and re-rendering for a scrape take longer than SCRAPE_BUDGET_S several
# scrapes in a row (a cluster too large to re-render per scrape, not one busy moment), scrapes stop
# asking for SCRAPE_BACKOFF_S and lag follows the poll interval instead.
SCRAPE_BUDGET_S = 2.0
SCRAPE_OVER_BUDGET = 3
SCRAPE_BACKOFF_S = 120.0
# Groups whose last commit the job saw this recently are the ones whose committed offsets a scrape
# also fetches (OffsetFetch, one request per coordinator for all of them): the job learns commits a
# trigger and a batch late, so a group committing as it consumes would read high by that much.
ACTIVE_WINDOW_S = 120.0
# At most this many groups' committed offsets are fetched for a scrape (the most recently committed).
ACTIVE_GROUPS_MAX = 2_000
Row = tuple[int, float | None]  # a partition's lag in records and when its next record was written

LAG_FAMILIES = (
    Family("kafka_consumergroup_partition_lag", G,
           "Records between the committed offset and the log end; --lag-granularity partition only."),
    Family("kafka_consumergroup_partition_lag_seconds", G,
           "Seconds since the record at the committed offset (the next one the group reads) was written, as of the "
           "scrape: method=timestamp is that record's own timestamp (CreateTime topics: the producer's clock; "
           "LogAppendTime: the broker's), method=interpolated its append time estimated from polled log ends (the "
           "record is gone, or the topic is measured by append time); 0 when nothing is left to read; "
           "--lag-granularity partition only.", age=True),
    Family("kafka_consumergroup_topic_total_lag", G, "Sum of the group's lag over a topic's partitions."),
    Family("kafka_consumergroup_topic_max_lag", G, "Largest lag of the group on one partition of a topic."),
    Family("kafka_consumergroup_topic_max_lag_seconds", G,
           "Largest lag in seconds of the group on a topic (see kafka_consumergroup_partition_lag_seconds).",
           age=True),
    Family("kafka_consumergroup_total_lag", G, "Sum of the group's lag over every partition it committed."),
    Family("kafka_consumergroup_max_lag", G, "Largest lag of the group on one partition."),
    Family("kafka_consumergroup_max_lag_seconds", G,
           "Largest lag in seconds of the group on one partition (see kafka_consumergroup_partition_lag_seconds).",
           age=True),
    Family("kafka_consumergroup_partition_lag_uncommitted", G,
           "Assigned partition the group never committed: log end minus log start (what an earliest-reset "
           "consumer has to read); --lag-granularity partition only."),
    Family("kafka_consumergroup_member_lag", G,
           "Sum of the lag of the partitions one member owns (uncommitted ones from the log start)."),
    Family("kafka_consumergroup_member_lag_seconds", G,
           "Largest lag in seconds among one member's partitions (see kafka_consumergroup_partition_lag_seconds).",
           age=True),
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
UNRESOLVED_TOPIC_IDS_FAMILY = Family(
    "rebalance_monitor_unresolved_topic_ids_total", C,
    "KIP-848 topic ids no name was found for, each counted once, by reason (unknown_topic_id: not in the "
    "cluster's metadata, e.g. a deleted topic; metadata_error: the lookup failed); their partitions are left "
    "out of member lag and assignments.")
OFFSETS_TOPIC_GAP_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_offsets", G,
                                  "High watermark minus last stable offset of an offsets-topic partition: records "
                                  "a read_committed reader (this job) cannot see yet because a transaction is open.")
OFFSETS_TOPIC_STUCK_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_seconds", G,
                                    "How long an offsets-topic partition's last stable offset has been held back.")
TIMESTAMP_TYPE_FAMILY = Family("kafka_topic_timestamp_type", G,
                               "1 for a tracked topic's message.timestamp.type (CreateTime: records carry the "
                               "producer's time; LogAppendTime: the broker's), what lag in seconds counts from.")
_F = {f.name: f for f in LAG_FAMILIES}
# The retention margin and records lost are rendered with the lag (same samples, same moment).
LAG_NAMES = (*_F, *(f.name for f in RETENTION_FAMILIES), HEALTH.name)


def member_partitions(summary: GroupSummary, assignments: Mapping[str, Sequence[TopicPartition]] | None,
                      mode: str = "client") -> dict[MemberLabels, list[TopicPartition]]:
    """Each listed member's labels (see :func:`~streaming.metrics.groups.member_labels`) and partitions;
    owner keys the summary leaves out are dropped."""
    members = {m.member: member_labels(m, mode) for m in summary.members}
    owned: dict[MemberLabels, list[TopicPartition]] = {}
    for owner, parts in (assignments or {}).items():
        if owner in members:
            owned.setdefault(members[owner], []).extend(parts)
    return owned


class LagSeries(PollingThread):
    """Lag series of every group, rendered into ``exporter``; a component (see :mod:`streaming.lifecycle`)
    whose thread re-renders them as the poller's samples arrive.

    ``on_refresh`` callbacks run after each refresh with its time (the job's input lag reads
    the same log ends).
    """

    def __init__(self, cluster: str, tracker: LagTracker, exporter: Exporter, per_partition: bool = True,
                 on_refresh: Sequence[Callable[[float], None]] = (), kafka_exporter: bool = False,
                 health: HealthWindows | None = None) -> None:
        super().__init__("lag-series")
        self.cluster = cluster
        self.kafka_exporter = kafka_exporter  # also kafka_exporter's families (streaming.metrics.compat)
        self._names = (*LAG_NAMES, *(f.name for f in compat.LAG_FAMILIES)) if kafka_exporter else LAG_NAMES
        self.lag = tracker
        self.exporter = exporter
        self.per_partition = per_partition
        self._on_refresh = list(on_refresh)
        self._lock = threading.Lock()
        self._offsets: dict[str, Mapping[TopicPartition, int]] = {}
        self._owned: dict[str, dict[MemberLabels, list[TopicPartition]]] = {}
        self._truncated: dict[str, set[tuple[TopicPartition, int]]] = {}
        self._truncations: dict[str, dict[str, int]] = {}
        self._lost = LostRecords()
        self.health = health or HealthWindows()  # the verdict's window, fed from the same samples
        self._has_lag: set[str] = set()  # groups whose cached text holds lag lines
        self.overtaken = 0  # renders that left out a partition whose commit overtook its log-end sample
        self._batch_active = threading.Event()  # a batch is being folded: the refresh waits
        self._batch_started = 0.0  # when the batch being folded started (monotonic)
        self._wanted_dirty = True  # the tracker's wanted partitions need a new set_wanted
        self._log_end_text = b""
        self._compat_topic_text = b""
        self._rendered_at = 0.0
        self._round: float | None = None
        self._fetch_log_ends: Callable[[], bool | None] | None = None
        self._fetch_committed: Callable[[list[str]], dict[str, dict[TopicPartition, int]]] | None = None
        self._last_commit: dict[str, float] = {}  # group -> when the job last saw it commit (epoch s)
        self._fresh: dict[str, dict[TopicPartition, int]] = {}  # committed offsets a scrape fetched
        self._max_age_s = 0.0
        self._freshen_lock = threading.Lock()
        self._skip_until = 0.0
        self._over_budget = 0  # freshens in a row that took longer than SCRAPE_BUDGET_S
        # The CPU the last refresh's rendering took (its thread's, lock and GIL waits left out): what a scrape
        # would spend re-rendering. Wall time would count a batch holding the lock, and one refresh that
        # waited out a long batch would leave the next scrape's lag a poll interval stale.
        self._refresh_seconds = 0.0
        self._sampled: set[TopicPartition] = set()  # partitions with a log-end sample, as of the last refresh
        self._retention_s: dict[str, float] = {}  # topic -> retention.ms in seconds, as of the last refresh
        self._overtaken_since_fetch = False  # a render left a partition out for want of a newer sample
        self._unreachable_at: float | None = None  # a scrape's fetch found the cluster unreachable then
        self._unresolved: Callable[[], Mapping[str, int]] = dict  # unresolved topic ids by reason

    def count_unresolved_topic_ids(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Where scrapes read how many KIP-848 topic ids had no name (see UNRESOLVED_TOPIC_IDS_FAMILY)."""
        self._unresolved = counts

    def refresh_on_scrape(self, fetch_log_ends: Callable[[], bool | None], max_age_s: float,
                          fetch_committed: Callable[[list[str]], dict[str, dict[TopicPartition, int]]] | None = None
                          ) -> None:
        """Before each scrape, log ends older than ``max_age_s`` are fetched (``fetch_log_ends()``, on the
        scrape's thread), with the committed offsets of the groups that committed lately
        (``fetch_committed(groups)``), and the lag series re-rendered (see :meth:`freshen`)."""
        self._fetch_log_ends, self._max_age_s, self._fetch_committed = fetch_log_ends, max_age_s, fetch_committed

    def freshen(self) -> None:
        """Make the lag a scrape shows as fresh as Kafka's own tool: its log ends at most ``max_age_s`` old."""
        if self._fetch_log_ends is None or self._max_age_s <= 0 or time.time() < self._skip_until:
            return
        if self._refresh_seconds > SCRAPE_BUDGET_S:  # re-rendering alone would blow the budget: don't start
            return
        if self._batch_active.is_set() and time.monotonic() - self._batch_started > SCRAPE_BUDGET_S:
            # A long batch (a catch-up) is being folded: its groups' lag is rendered as it publishes them, and
            # a whole refresh now would take the driver's one interpreter from it (scrapes during W2's first
            # batch took 15 s each and made the fold 70 % longer).
            return
        if self._unreachable_at is not None:
            # The cluster was unreachable: every scrape would wait out the quick timeout again. Scrapes
            # ask afresh once the poller's own round has reached it.
            last = self.lag.last_round_at()
            if last is None or last <= self._unreachable_at:
                return
            self._unreachable_at = None
        with self._freshen_lock:  # concurrent scrapes share one round
            last = self.lag.last_round_at()
            if last is not None and time.time() - last <= self._max_age_s and not self._overtaken_since_fetch:
                if last != self._round:  # a poll round just ended: render its samples, not the older ones
                    self.refresh()
                return
            started = time.monotonic()
            self._overtaken_since_fetch = False
            fetched = self._fetch_log_ends()
            if fetched is None:
                self._unreachable_at = time.time()
                log.warning("the cluster did not answer a scrape's log-end fetch; scrapes use the poller's "
                            "samples until one of its rounds reaches it")
                return
            if self._fetch_committed is not None:
                fetched = self._fetch_active_commits() or fetched
            if fetched:
                self.refresh()
            cost = time.monotonic() - started
            self._over_budget = self._over_budget + 1 if cost > SCRAPE_BUDGET_S else 0
            if self._over_budget >= SCRAPE_OVER_BUDGET:
                self._skip_until, self._over_budget = time.time() + SCRAPE_BACKOFF_S, 0
                log.warning("fresh log ends for a scrape took %.1fs %d times in a row; scrapes use the poll "
                            "interval's samples for the next %.0fs", cost, SCRAPE_OVER_BUDGET, SCRAPE_BACKOFF_S)

    def _fetch_active_commits(self) -> bool:
        """Committed offsets of the groups that committed within ACTIVE_WINDOW_S, fetched now."""
        assert self._fetch_committed is not None
        since = time.time() - ACTIVE_WINDOW_S
        with self._lock:
            recent = [(at, g) for g, at in self._last_commit.items() if at >= since and g in self._offsets]
        active = [g for _, g in sorted(recent, reverse=True)[:ACTIVE_GROUPS_MAX]]
        found = self._fetch_committed(active) if active else {}
        with self._lock:
            self._fresh = {g: {tp: o for tp, o in offsets.items() if tp in self._offsets.get(g, {})}
                           for g, offsets in found.items() if g in self._offsets}
            self._wanted_dirty = True
        return bool(found)

    def _committed(self, group: str) -> Mapping[TopicPartition, int]:
        """What the group's lag is computed from: the job's committed offsets, newer ones a scrape fetched
        in their place (the offsets topic remains the source of which partitions the group has)."""
        committed = self._offsets[group]
        fresh = self._fresh.get(group)
        return {**committed, **fresh} if fresh else committed

    # -- the batch thread -----------------------------------------------------------

    def add_refresh_hook(self, callback: Callable[[float], None]) -> None:
        """``callback(now)`` after every refresh (what else reads the same log ends)."""
        self._on_refresh.append(callback)

    def update(self, group: str, committed: Mapping[TopicPartition, int],
               owned: Mapping[MemberLabels, list[TopicPartition]] | None, last_commit_s: float = 0.0) -> None:
        """A group changed: keep what its lag is computed over and render its lag series. ``committed``
        is kept as given (the publisher hands over a copy: :meth:`PartitionOffsets.committed`); ``owned``
        None keeps the members' partitions as they were (the group changed by commits alone)."""
        with self._lock:
            owned = self._owned.get(group, {}) if owned is None else dict(owned)
            if committed != self._offsets.get(group) or owned != self._owned.get(group):
                self._wanted_dirty = True
            self._offsets[group] = committed
            self._owned[group] = owned
            self._last_commit[group] = last_commit_s
            fresh = self._fresh.get(group)
            if fresh:  # a fetched offset the job has now seen committed (or passed) is not needed any more
                self._fresh[group] = {tp: o for tp, o in fresh.items() if o > committed.get(tp, o)}
            if group in self._has_lag or self._any_sampled(committed, owned):
                self._render(group)  # else nothing to show yet: the refresh after its first sample renders it

    def _any_sampled(self, committed: Mapping[TopicPartition, int],
                     owned: Mapping[MemberLabels, list[TopicPartition]]) -> bool:
        sampled = self._sampled
        return any(tp in sampled for tp in committed) or any(tp in sampled for parts in owned.values()
                                                             for tp in parts)

    def remove(self, group: str) -> None:
        """Forget a deleted or expired group."""
        with self._lock:
            for state in (self._offsets, self._owned, self._truncated, self._truncations, self._last_commit,
                          self._fresh):
                state.pop(group, None)
            self._lost.forget(group)
            self.health.forget(group)
            self._has_lag.discard(group)
            self._wanted_dirty = True

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around a batch's fold: the refresh waits rather than contend for the lock and the GIL
        (at 100,000 groups the two threads handing the lock back and forth doubled the fold)."""
        self._batch_started = time.monotonic()
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
        started = time.thread_time()
        now = time.time() if now is None else now
        with self._lock:
            wanted = None
            if self._wanted_dirty:
                committed = {(t, p, o) for group in self._offsets for (t, p), o in self._committed(group).items()}
                uncommitted = {tp for group, owned in self._owned.items() for parts in owned.values() for tp in parts
                               if tp not in self._offsets.get(group, {})}
                wanted = committed, uncommitted
                self._wanted_dirty = False
        if wanted is not None:
            self.lag.set_wanted(*wanted)
        sampled = self.lag.sampled_at()
        self._sampled = set(sampled)
        self._retention_s = self.lag.retention_seconds()
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
            if self.kafka_exporter:
                topics = Lines(self.cluster)
                compat.topic_lines(topics, self._sampled_offsets(grouped & sampled.keys()))
                encoded = topics.encoded()
                self._compat_topic_text = b"".join(f.header + encoded.get(f.name, b"") for f in compat.TOPIC_FAMILIES)
            self._rendered_at, self._round = now, self.lag.last_round_at()
        self._refresh_seconds = time.thread_time() - started
        for callback in self._on_refresh:
            callback(now)

    def _run(self) -> None:
        """Re-render after every poll round and at least every third of the staleness limit."""
        period_s = max(1.0, self.lag.stale_after_s / 3)
        while not self._stopping.wait(1.0):
            if self._batch_active.is_set():
                continue
            now = time.time()
            if self.lag.last_round_at() != self._round or now - self._rendered_at >= period_s:
                self.refresh(now)

    # -- scrape time ------------------------------------------------------------------

    def text(self) -> bytes:
        """The log ends, the poller's health and the offsets topic's open transactions."""
        lines = Lines(self.cluster)
        last_round = self.lag.last_round_at()
        for reason, count in sorted(self.lag.errors().items()):
            lines.add(POLL_ERRORS_FAMILY, (("reason", reason),), count)
        for reason, count in sorted(self._unresolved().items()):
            lines.add(UNRESOLVED_TOPIC_IDS_FAMILY, (("reason", reason),), count)
        for topic, kind in sorted(self.lag.timestamp_types().items()):
            lines.add(TIMESTAMP_TYPE_FAMILY, (("topic", topic), ("type", kind)), 1)
        for partition, gap in sorted(self.lag.offsets_topic_gaps().items()):
            labels = (("partition", str(partition)),)
            lines.add(OFFSETS_TOPIC_GAP_FAMILY, labels, gap.gap)
            if gap.stuck_since is not None:
                lines.add(OFFSETS_TOPIC_STUCK_FAMILY, labels, max(0.0, time.time() - gap.stuck_since))
        text = lines.encoded()
        with self._lock:
            chunks = [LOG_END_FAMILY.header, self._log_end_text, self._compat_topic_text, POLL_TIMESTAMP_FAMILY.header]
        if last_round is not None:
            chunks.append(f'{POLL_TIMESTAMP_FAMILY.name}{{{lines.prefix}}} {last_round!r}\n'.encode())
        for family in (POLL_ERRORS_FAMILY, UNRESOLVED_TOPIC_IDS_FAMILY, OFFSETS_TOPIC_GAP_FAMILY,
                       OFFSETS_TOPIC_STUCK_FAMILY, TIMESTAMP_TYPE_FAMILY):
            chunks += [family.header, text.get(family.name, b"")]
        return b"".join(chunks)

    # -- rendering (under the lock) -------------------------------------------------------

    def _render(self, group: str) -> None:
        lines = Lines(self.cluster)
        self._lag_lines(lines, group, self._committed(group))
        self.exporter.put(group, lines, self._names)

    def _sampled_offsets(self, partitions: set[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        found = {}
        for topic, partition in partitions:
            lag = self.lag.lag_uncommitted(topic, partition)
            if lag is not None:
                found[(topic, partition)] = (lag.log_start, lag.log_end)
        return found

    def _lag_lines(self, lines: Lines, group: str, committed: Mapping[TopicPartition, int]) -> None:
        """Per-partition lag (partition granularity), per-topic / per-group aggregates, member lag.

        A partition without a fresh log-end sample has no lag series (never a stale number), nor
        has one whose commit overtook the last sample (the consumer moved on since: lag waits for
        a sample taken after the commit instead of showing 0). Lag in seconds is an age: the
        lines keep when the next record was written and scrapes show how long ago that was.
        """
        found: dict[TopicPartition, Row] = {}
        per_topic: dict[str, list[Row]] = {}
        exporter_rows: list[compat.CompatRow] = []
        margins: dict[TopicPartition, int] = {}
        log_ends: dict[TopicPartition, int] = {}
        for (topic, partition), offset in sorted(committed.items()):
            lag = self.lag.lag(topic, partition, offset)
            overtaken = lag is not None and lag.lag < 0 and not lag.truncated
            exporter_rows.append((topic, partition, offset, None if lag is None or overtaken else lag.lag))
            if lag is None:
                continue
            margins[(topic, partition)] = margin(offset, lag.log_start)
            log_ends[(topic, partition)] = lag.log_end
            self._lost.observe(group, (topic, partition), offset, lag.log_start)
            if lag.truncated:
                self._count_truncation(group, topic, ((topic, partition), offset))
            elif overtaken:
                self.overtaken += 1
                self._overtaken_since_fetch = True
                continue
            row = found[(topic, partition)] = (max(0, lag.lag), lag.since)
            per_topic.setdefault(topic, []).append(row)
            if self.per_partition:
                labels = (("group", group), ("topic", topic), ("partition", str(partition)))
                lines.add(_F["kafka_consumergroup_partition_lag"], labels, row[0])
                if lag.since is not None:
                    lines.add_age(_F["kafka_consumergroup_partition_lag_seconds"],
                                  (*labels, ("method", lag.seconds_method or "")), lag.since)
        owned = self._owned.get(group, {})
        for parts in owned.values():
            for topic, partition in parts:
                if (topic, partition) in committed or (topic, partition) in found:
                    continue
                exporter_rows.append((topic, partition, -1, -1))
                lag = self.lag.lag_uncommitted(topic, partition)
                if lag is None:
                    continue
                found[(topic, partition)] = (max(0, lag.lag), None)
                if self.per_partition:
                    lines.add(_F["kafka_consumergroup_partition_lag_uncommitted"],
                              (("group", group), ("topic", topic), ("partition", str(partition))), max(0, lag.lag))
        everything: list[Row] = []
        for topic, rows in per_topic.items():
            _aggregates(lines, (("group", group), ("topic", topic)), rows, "kafka_consumergroup_topic_")
            everything.extend(rows)
        if everything:
            _aggregates(lines, (("group", group),), everything, "kafka_consumergroup_")
        for owner_labels, parts in owned.items():
            rows = [found[tp] for tp in parts if tp in found]
            if rows:
                member: MemberLabels = (("group", group), *owner_labels)
                lines.add(_F["kafka_consumergroup_member_lag"], member, sum(lag for lag, _ in rows))
                oldest = _oldest(rows)
                if oldest is not None:
                    lines.add_age(_F["kafka_consumergroup_member_lag_seconds"], member, oldest)
        for topic, count in sorted(self._truncations.get(group, {}).items()):
            lines.add(_F["kafka_consumergroup_lag_truncations_total"], (("group", group), ("topic", topic)), count)
        retention = self._retention_s
        deadlines = [since + retention[tp[0]] for tp, (_, since) in found.items()
                     if since is not None and since != math.inf and tp[0] in retention]
        retention_lines(lines, group, margins, self._lost.totals(group), self.per_partition,
                        min(deadlines) if deadlines else None)
        sampled_at = self.lag.last_round_at()
        if sampled_at is not None and log_ends:
            self.health.record(group, {tp: committed[tp] for tp in log_ends}, log_ends,
                               self._last_commit.get(group, 0.0), sampled_at)
            lines.add(HEALTH, (("group", group), *zip(("status", "reason"), self.health.verdict(group, sampled_at),
                                                      strict=True)), 1)
        if self.kafka_exporter:
            compat.lag_lines(lines, group, exporter_rows, self.per_partition)
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


def _aggregates(lines: Lines, labels: tuple[tuple[str, str], ...], rows: list[Row], prefix: str) -> None:
    lags = [lag for lag, _ in rows]
    lines.add(_F[f"{prefix}total_lag"], labels, sum(lags))
    lines.add(_F[f"{prefix}max_lag"], labels, max(lags))
    oldest = _oldest(rows)
    if oldest is not None:
        lines.add_age(_F[f"{prefix}max_lag_seconds"], labels, oldest)


def _oldest(rows: list[Row]) -> float | None:
    """The earliest moment among the rows' (the largest lag in seconds); None when none is known."""
    moments = [since for _, since in rows if since is not None]
    return min(moments) if moments else None

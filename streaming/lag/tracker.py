"""Consumer lag you can trust: the numbers, kept fresh or withdrawn.

:class:`LagTracker` holds what the log-end poller (:mod:`streaming.lag.poller`) last saw
and answers the lag series' questions: offset lag = log end (the high watermark, as
Kafka's ``kafka-consumer-groups --describe``) − committed offset, never clamped, and lag
in seconds = now − timestamp of the record at the committed offset (the next record the
group reads), measured by :mod:`streaming.lag.timestamps`. Only where that record cannot be
read (deleted by retention, lookup refused or not yet done) are seconds interpolated over
a long, coarse log-end history, and the answer says so.

A lag computed from an old log-end sample would fall towards 0 as commits move on while
the log end stays frozen; so every answer carries the sample's age and none is given
once it is older than ``stale_after_s``: the series disappears instead of lying.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

from streaming.lag.config import DEFAULT_INTERVAL_S
from streaming.lag.history import LogEndRing, appended_at
from streaming.protocol import OffsetsTopicGap, TopicPartition

Lookup = tuple[TopicPartition, int]  # a partition and the committed offset to read at
SecondsMethod = Literal["timestamp", "interpolated"]

DEFAULT_LOOKUPS_PER_ROUND = 1000
HISTORY_RESOLUTION_S = 60.0
HISTORY_SPAN_S = 24 * 3600.0


@dataclass(frozen=True)
class PartitionLag:
    """One partition's lag for one committed offset (or from the log start, uncommitted)."""

    lag: int  # log_end - committed, not clamped
    log_end: int
    log_start: int
    seconds: float | None
    seconds_method: SecondsMethod | None
    sample_age_s: float
    # When the next record to read was written: ``seconds`` is ``now - since`` and grows as long as
    # that record stays unread (inf when nothing is left to read: 0 seconds; None when not known).
    since: float | None = None
    # lag < 0 from a log-end sample taken after the commit was first seen: the log really
    # ended below the committed offset (truncation, or a commit past the end). A negative
    # lag from an older sample only means the consumer overtook that sample: show 0.
    truncated: bool = False


class TopicConfig(NamedTuple):
    """The settings of a tracked topic the lag series depend on."""

    timestamp_type: str = ""  # message.timestamp.type: CreateTime or LogAppendTime ("" not known)
    retention_ms: int | None = None  # retention.ms (-1: unlimited; None: not known)
    cleanup_policy: str = ""  # cleanup.policy: "delete", "compact" or "compact,delete" ("" not known)

    @property
    def deletes_by_time(self) -> bool:
        """Whether ``retention.ms`` applies: a compact-only topic deletes nothing by age (Kafka's LogCleaner
        compacts it; only a policy including ``delete`` has the log's retention delete segments)."""
        return "delete" in self.cleanup_policy.split(",") if self.cleanup_policy else True


@dataclass(frozen=True)
class LogOffsets:
    log_start: int
    log_end: int
    sampled_at: float


@dataclass(frozen=True)
class RecordTime:
    """What a lookup found at ``(partition, committed)``: the timestamp of the first record
    at or after it, or ``None`` when only transaction markers lay between it and the log
    end seen by the lookup (``log_end``), i.e. nothing to read at that moment."""

    timestamp_ms: int | None
    log_end: int


class LagTracker:
    """Thread-safe store of log offsets, record timestamps and poll health.

    The lag series say what they need with :meth:`set_wanted` and reads :meth:`lag`; the
    poller reads :meth:`partitions` and :meth:`next_lookups` and writes the ``record_*``
    methods. ``stale_after_s`` defaults to three poll intervals.
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, stale_after_s: float | None = None,
                 history_resolution_s: float = HISTORY_RESOLUTION_S, history_span_s: float = HISTORY_SPAN_S,
                 clock: Callable[[], float] = time.time, append_time_topics: str = "") -> None:
        self.stale_after_s = 3 * interval_s if stale_after_s is None else stale_after_s
        # Topics whose lag in seconds is measured by append time (interpolated over the log-end
        # history) rather than by the record's own timestamp.
        self._append_time = re.compile(append_time_topics) if append_time_topics else None
        self._topic_configs: dict[str, tuple[TopicConfig, float]] = {}  # topic -> (its settings, when read)
        self._resolution_s = history_resolution_s
        self._capacity = max(2, math.ceil(history_span_s / history_resolution_s) + 1)
        self._clock = clock
        self._lock = threading.Lock()
        self._committed: dict[Lookup, float] = {}  # -> when first seen (our clock)
        self.wanted_changed = threading.Event()  # new committed offsets: worth a lookup now
        self._uncommitted: set[TopicPartition] = set()
        self._watched: set[TopicPartition] = set()
        self._offsets: dict[TopicPartition, LogOffsets] = {}
        self._history: dict[TopicPartition, LogEndRing] = {}
        self._times: dict[Lookup, RecordTime] = {}
        self._tried_at: dict[Lookup, float] = {}
        self._gaps: dict[int, OffsetsTopicGap] = {}
        self._gaps_at: float | None = None
        self._lso: dict[int, int] = {}
        self._last_round_at: float | None = None
        self._errors: dict[str, int] = {}

    # -- what to track (lag series) ----------------------------------------------------

    def set_wanted(self, committed: Iterable[tuple[str, int, int]],
                   uncommitted: Iterable[TopicPartition] = ()) -> None:
        """The groups' committed ``(topic, partition, offset)`` and the assigned partitions no
        one has committed. Offsets below 0 mean "no commit" (Kafka's tool ignores -1 too).
        Partitions dropped here are forgotten at the next round, history included."""
        now = self._clock()
        with self._lock:
            before = self._committed
            self._committed = {((t, p), o): before.get(((t, p), o), now) for t, p, o in committed if o >= 0}
            self._uncommitted = set(uncommitted)
            if self._committed.keys() - before.keys():
                self.wanted_changed.set()

    def set_watched(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions polled for their log offsets alone, apart from any group (the job's own
        source partitions, for its input lag)."""
        with self._lock:
            self._watched = set(partitions)

    # -- the poller's side ---------------------------------------------------------------

    def partitions(self) -> set[TopicPartition]:
        """Partitions whose log start and end the next round should fetch."""
        with self._lock:
            return {tp for tp, _ in self._committed} | self._uncommitted | self._watched

    def next_lookups(self, limit: int = DEFAULT_LOOKUPS_PER_ROUND) -> dict[TopicPartition, tuple[int, int]]:
        """Up to ``limit`` partitions whose record timestamp at a committed offset is unknown:
        ``{partition: (committed, log_end)}``, one committed offset per partition (one fetch
        each). Never-tried lookups first, then the longest untried, so a backlog larger than
        ``limit`` is worked through round-robin. Offsets the log end has not passed need no
        lookup (caught up), nor do offsets below the log start (the record is gone)."""
        now = self._clock()
        with self._lock:
            due = []
            for key in self._committed:
                tp, committed = key
                offsets = self._fresh(tp, now)
                if offsets is None or not offsets.log_start <= committed < offsets.log_end:
                    continue
                known = self._times.get(key)
                if known is not None and (known.timestamp_ms is not None or known.log_end == offsets.log_end):
                    continue
                due.append((self._tried_at.get(key, 0.0), key))
            chosen: dict[TopicPartition, tuple[int, int]] = {}
            for _, (tp, committed) in sorted(due):
                if len(chosen) >= limit:
                    break
                if tp not in chosen:
                    chosen[tp] = (committed, self._offsets[tp].log_end)
            return chosen

    def record_offsets(self, offsets: Mapping[TopicPartition, tuple[int, int]], sampled_at: float) -> None:
        """A round's ``{partition: (log_start, log_end)}``, sampled at ``sampled_at``."""
        with self._lock:
            for tp, (start, end) in offsets.items():
                previous = self._offsets.get(tp)
                if previous is not None and previous.sampled_at > sampled_at:
                    continue  # a quick fetch got a newer sample while this round ran
                if previous is not None and end < previous.log_end:  # truncated or re-created
                    self._times = {k: v for k, v in self._times.items() if k[0] != tp}
                self._offsets[tp] = LogOffsets(int(start), int(end), sampled_at)
                ring = self._history.get(tp)
                if ring is None:
                    ring = self._history[tp] = LogEndRing(self._capacity)
                ring.add(sampled_at, int(end), self._resolution_s)

    def record_times(self, found: Mapping[Lookup, RecordTime], tried: Iterable[Lookup], at: float) -> None:
        """Lookup results; ``tried`` are all lookups attempted (failures are retried later)."""
        with self._lock:
            self._times.update(found)
            for key in tried:
                self._tried_at[key] = at

    def record_offsets_topic(self, high_watermarks: Mapping[int, int], stable: Mapping[int, int],
                             sampled_at: float) -> None:
        """The offsets topic's per-partition high watermark and last stable offset."""
        with self._lock:
            gaps = {}
            for partition, hw in high_watermarks.items():
                if partition not in stable:
                    continue
                lso, gap = stable[partition], hw - stable[partition]
                before = self._gaps.get(partition)
                if gap <= 0:
                    since = None
                elif before is not None and before.stuck_since is not None and self._lso.get(partition) == lso:
                    since = before.stuck_since
                else:
                    since = sampled_at
                gaps[partition] = OffsetsTopicGap(gap, since)
                self._lso[partition] = lso
            self._gaps, self._gaps_at = gaps, sampled_at

    def record_round(self, at: float, errors: Mapping[str, int]) -> None:
        """End of a round: errors by reason; ``at`` is stored only if anything was fetched."""
        with self._lock:
            for reason, count in errors.items():
                self._errors[reason] = self._errors.get(reason, 0) + count
            if at > 0:
                self._last_round_at = at

    def forget_unwanted(self) -> None:
        """Drop offsets, history and timestamps nothing asks for any more (bounded memory)."""
        with self._lock:
            keep = {tp for tp, _ in self._committed} | self._uncommitted | self._watched
            self._offsets = {tp: v for tp, v in self._offsets.items() if tp in keep}
            self._history = {tp: v for tp, v in self._history.items() if tp in keep}
            self._times = {k: v for k, v in self._times.items() if k in self._committed}
            self._tried_at = {k: v for k, v in self._tried_at.items() if k in self._committed}
            topics = {topic for topic, _ in keep}  # a deleted topic's settings go with its last group's commits
            self._topic_configs = {t: v for t, v in self._topic_configs.items() if t in topics}

    # -- the lag series' side ------------------------------------------------------------

    def lag(self, topic: str, partition: int, committed: int) -> PartitionLag | None:
        """Lag of a group that committed ``committed``; None for no commit (< 0), no log-end
        sample, or a sample older than ``stale_after_s``. ``truncated`` is known only for
        offsets given to :meth:`set_wanted` (it compares when the commit was first seen)."""
        if committed < 0:
            return None
        now = self._clock()
        with self._lock:
            offsets = self._fresh((topic, partition), now)
            if offsets is None:
                return None
            since, method = self._since((topic, partition), committed, offsets)
            seen_at = self._committed.get(((topic, partition), committed))
            truncated = committed > offsets.log_end and seen_at is not None and offsets.sampled_at > seen_at
            seconds = None if since is None else max(0.0, now - since)
            return PartitionLag(offsets.log_end - committed, offsets.log_end, offsets.log_start,
                                seconds, method, now - offsets.sampled_at, since=since, truncated=truncated)

    def log_range(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(log start, log end) of the partition's fresh sample; None without one (the job's input lag)."""
        found = self.lag_uncommitted(topic, partition)
        return None if found is None else (found.log_start, found.log_end)

    def lag_uncommitted(self, topic: str, partition: int) -> PartitionLag | None:
        """Lag of an assigned partition with no commit: log end − log start, the records a
        consumer starting from the earliest offset has to read (Kafka's tool prints "-"
        there). No seconds: which record comes next depends on the consumer's
        ``auto.offset.reset``, which Kafka does not know."""
        now = self._clock()
        with self._lock:
            offsets = self._fresh((topic, partition), now)
            if offsets is None:
                return None
            return PartitionLag(offsets.log_end - offsets.log_start, offsets.log_end, offsets.log_start,
                                None, None, now - offsets.sampled_at)

    def offsets_topic_gaps(self) -> dict[int, OffsetsTopicGap]:
        """Per partition of ``__consumer_offsets``: high watermark − last stable offset (> 0
        while a transaction is open: a read_committed reader, our job, sees nothing past it).
        Empty when the last measurement is stale."""
        now = self._clock()
        with self._lock:
            if self._gaps_at is None or now - self._gaps_at > self.stale_after_s:
                return {}
            return dict(self._gaps)

    def record_topic_configs(self, configs: Mapping[str, TopicConfig], at: float) -> None:
        """Topics' settings as read at ``at`` (an empty TopicConfig: reading them failed)."""
        with self._lock:
            self._topic_configs.update({topic: (config, at) for topic, config in configs.items()})

    def timestamp_types(self) -> dict[str, str]:
        """The tracked topics' ``message.timestamp.type`` where read."""
        with self._lock:
            topics = self._topics()
            return {topic: config.timestamp_type for topic, (config, _) in self._topic_configs.items()
                    if topic in topics and config.timestamp_type}

    def retention_seconds(self) -> dict[str, float]:
        """The tracked topics' time-based retention (``retention.ms``) where read and not unlimited; none for a
        topic whose ``cleanup.policy`` is ``compact`` alone (no deletion by age there)."""
        with self._lock:
            topics = self._topics()
            return {topic: config.retention_ms / 1000 for topic, (config, _) in self._topic_configs.items()
                    if topic in topics and config.retention_ms is not None and config.retention_ms > 0
                    and config.deletes_by_time}

    def topics_to_describe(self, max_age_s: float) -> set[str]:
        """Tracked topics whose settings are unknown or older than ``max_age_s``."""
        now = self._clock()
        with self._lock:
            topics = self._topics()
            known = self._topic_configs
            return {t for t in topics if t not in known or now - known[t][1] > max_age_s}

    def _topics(self) -> set[str]:
        return {topic for (topic, _), _ in self._committed} | {topic for topic, _ in self._uncommitted}

    def log_starts(self) -> dict[TopicPartition, int]:
        """The last sampled log start of each partition still tracked."""
        with self._lock:
            keep = {tp for tp, _ in self._committed} | self._uncommitted | self._watched
            return {tp: offsets.log_start for tp, offsets in self._offsets.items() if tp in keep}

    def sampled_at(self) -> dict[TopicPartition, float]:
        """When each tracked partition's log offsets were last fetched (epoch seconds)."""
        with self._lock:
            return {tp: offsets.sampled_at for tp, offsets in self._offsets.items()}

    def last_round_at(self) -> float | None:
        """When the last round that fetched anything started (epoch seconds)."""
        with self._lock:
            return self._last_round_at

    def errors(self) -> dict[str, int]:
        """Poll errors so far by reason (see :data:`streaming.cluster.errors.ERROR_REASONS`)."""
        with self._lock:
            return dict(self._errors)

    def _fresh(self, tp: TopicPartition, now: float) -> LogOffsets | None:
        offsets = self._offsets.get(tp)
        if offsets is None or now - offsets.sampled_at > self.stale_after_s:
            return None
        return offsets

    def _since(self, tp: TopicPartition, committed: int, offsets: LogOffsets) -> tuple[float | None,
                                                                                      SecondsMethod | None]:
        """When the record at ``committed`` was written (inf: nothing left to read), and how it is known."""
        if committed >= offsets.log_end:
            return math.inf, "timestamp"
        known = self._times.get((tp, committed))
        by_record = self._append_time is None or self._append_time.search(tp[0]) is None
        if known is not None and known.timestamp_ms is not None and by_record:
            return known.timestamp_ms / 1000, "timestamp"
        if known is not None and known.timestamp_ms is None and known.log_end == offsets.log_end:
            return math.inf, "timestamp"  # only transaction markers (or aborted records) left to read
        ring = self._history.get(tp)
        samples = ring.samples() if ring is not None else []
        if not samples or samples[-1][0] < offsets.sampled_at:  # the ring keeps one a minute
            samples.append((offsets.sampled_at, offsets.log_end))
        # Before the record's own time has been asked for, a bare lower bound (a record older than the
        # first sample, no produce rate yet) is no estimate: a partition sampled once would read ~0 s. A
        # record below the log start is gone and never asked for: the bound is all there will be.
        asked = (tp, committed) in self._tried_at or committed < offsets.log_start
        at = appended_at(samples, committed, bound=asked)
        if at is None:
            return None, None
        return at, "interpolated"

"""The job's own metrics, as prometheus_client instruments: records, errors, batches, input lag, limits.

Ordinary counters, gauges and a histogram in :attr:`JobMetrics.registry` (one registry per
job, so tests each get a fresh one), rendered by the exporter after the group series.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from decoders.records import RECORD_TYPE_NAMES
from streaming.lag.config import DEFAULT_INTERVAL_S
from streaming.protocol import SourceOffsets, TopicPartition

disable_created_metrics()  # one *_created series per counter child doubles the job's lines for nothing used

# Why group state was rebuilt from the beginning of the offsets topic (see streaming.driver.rebuild).
STATE_REBUILD_REASONS = ("checkpoint_age",)
# Micro-batches take from a fraction of a second to minutes.
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class JobMetrics:
    """The job's instruments, and the input lag: how far the job is behind its source topic.

    Input lag reads the source partitions' log ends from ``source`` (the lag tracker: the lag poller
    samples them once :meth:`observe_batch` has named them).
    """

    def __init__(self, cluster: str, source: SourceOffsets, lag_poll_seconds: float = DEFAULT_INTERVAL_S) -> None:
        self.cluster = cluster
        self.source = source
        self.registry = r = CollectorRegistry(auto_describe=False)
        labels = ["cluster"]
        self.records = Counter("rebalance_monitor_records", "__consumer_offsets records decoded, by record type.",
                               [*labels, "record_type"], registry=r)
        self.decode_errors = Counter("rebalance_monitor_decode_errors",
                                     "__consumer_offsets records that could not be decoded, by reason.",
                                     [*labels, "reason"], registry=r)
        self.skipped_offsets = Counter("rebalance_monitor_skipped_offsets",
                                       "__consumer_offsets offsets spanned by batches without a record "
                                       "(compacted away, transaction markers, aborted commits).", labels, registry=r)
        self.batch_duration = Histogram("rebalance_monitor_batch_duration_seconds",
                                        "Wall time of one streaming micro-batch.", labels,
                                        buckets=BATCH_DURATION_BUCKETS, registry=r)
        self.input_lag_records = Gauge("rebalance_monitor_input_lag_records",
                                       "Records of the source topic not yet processed: its polled log-end "
                                       "offsets minus the offsets the last batch ended at (before the first "
                                       "batch, the offsets the query starts from).", labels, registry=r)
        self.input_lag_seconds = Gauge("rebalance_monitor_input_lag_seconds",
                                       "How far behind the source topic the job is in time: now minus the "
                                       "newest processed record's timestamp while records remain unread, else 0.",
                                       labels, registry=r)
        self.last_batch = Gauge("rebalance_monitor_last_batch_timestamp_seconds",
                                "When the query last made progress: a micro-batch finished, or a trigger found "
                                "no new data (caught up). From the job's start: its checkpoint's last batch, or "
                                "when a checkpoint with none was first started, or the job's start.", labels,
                                registry=r)
        self.groups = Gauge("rebalance_monitor_groups", "Groups the job currently exports.", labels, registry=r)
        self.series = Gauge("rebalance_monitor_series", "Group series in the last scrape.", labels, registry=r)
        self.series_dropped = Gauge("rebalance_monitor_series_dropped",
                                    "Group series left out of the last scrape by --max-series.", labels, registry=r)
        self.groups_dropped = Gauge("rebalance_monitor_groups_dropped",
                                    "New groups the last batch turned away by --max-groups (not tracked).", labels,
                                    registry=r)
        self.members_dropped = Gauge("rebalance_monitor_members_dropped",
                                     "Member series left out by --max-members-per-group, over every group.", labels,
                                     registry=r)
        self.limit_hits = Counter("rebalance_monitor_limit_hits",
                                  "Times a limit turned something away: max_groups, once per new group and batch; "
                                  "max_members_per_group, once per render of a group whose member series it cut.",
                                  [*labels, "limit"], registry=r)
        self.query_restarts = Counter("rebalance_monitor_query_restarts",
                                      "Times the streaming query failed and the job started it again from its "
                                      "checkpoint.", labels, registry=r)
        self.query_restarts.labels(cluster)  # 0 from the start: increase() sees the first restart
        self.freshen_late = Counter("rebalance_monitor_lag_freshen_late",
                                    "Scrapes that served the lag as last rendered because fetching fresh log ends "
                                    "and commits outlasted half of their scrape timeout.", labels, registry=r)
        self.freshen_late.labels(cluster)
        self.checkpoint_age = Gauge("rebalance_monitor_checkpoint_age_seconds",
                                    "Age of the checkpoint the streaming query last started from: the start time "
                                    "minus when its last committed batch was planned (0: there was none).", labels,
                                    registry=r)
        self.state_rebuilds = Counter("rebalance_monitor_state_rebuilds",
                                      "Times the job set its checkpoint aside and rebuilt group state from the "
                                      "beginning of the offsets topic, by reason (checkpoint_age: older than "
                                      "--rebuild-after-seconds, by default the topic's delete.retention.ms).",
                                      [*labels, "reason"], registry=r)
        for reason in STATE_REBUILD_REASONS:  # 0 from the start: increase() sees the first rebuild
            self.state_rebuilds.labels(cluster, reason)
        self.ready = Gauge("rebalance_monitor_ready",
                           "1 once the job has caught up with the offsets topic since its query last started "
                           "(what /-/ready answers), else 0.", labels, registry=r)
        self.lag_poll_interval = Gauge("rebalance_monitor_lag_poll_interval_seconds",
                                       "The configured --lag-poll-seconds: what LagPollerStalled measures a silent "
                                       "lag poller against.", labels, registry=r)
        self.lag_poll_interval.labels(cluster).set(lag_poll_seconds)
        self._lock = threading.Lock()
        self._processed: dict[TopicPartition, int] = {}
        self.batch_seen = False  # a batch completed in this process (until then input lag counts from the start)
        self._newest_record_s: float | None = None
        self.records_behind: int | None = None
        self.last_progress: float | None = None  # what last_batch holds, for the job's restart decisions

    def count_records(self, by_type: Mapping[int, int], newest_record_ms: int | None = None) -> None:
        for record_type, count in by_type.items():
            self.records.labels(self.cluster, RECORD_TYPE_NAMES.get(record_type, f"Unknown{record_type}")).inc(count)
        if newest_record_ms:
            with self._lock:
                self._newest_record_s = max(self._newest_record_s or 0.0, newest_record_ms / 1000)

    def count_decode_errors(self, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            self.decode_errors.labels(self.cluster, reason).inc(count)

    def count_limits(self, hits: Mapping[str, int], groups_dropped: int, members_dropped: int) -> None:
        """The group stage's limits after a batch: hits since the last one (every limit's series from
        the first batch on, so increase() sees the first hit), what is left out now."""
        for limit in ("max_groups", "max_members_per_group"):
            self.limit_hits.labels(self.cluster, limit).inc(hits.get(limit, 0))
        self.groups_dropped.labels(self.cluster).set(groups_dropped)
        self.members_dropped.labels(self.cluster).set(members_dropped)

    def count_series(self, groups: int, kept: int, dropped: int) -> None:
        """What a scrape served: groups exported, group series kept and left out by --max-series."""
        self.groups.labels(self.cluster).set(groups)
        self.series.labels(self.cluster).set(kept)
        self.series_dropped.labels(self.cluster).set(dropped)

    def observe_batch(self, seconds: float, skipped_offsets: int, processed: Mapping[TopicPartition, int],
                      finished_at: float) -> None:
        """One micro-batch's progress: duration, offsets spanned without a record, where it ended."""
        self.batch_duration.labels(self.cluster).observe(seconds)
        self.skipped_offsets.labels(self.cluster).inc(skipped_offsets)
        self.last_batch.labels(self.cluster).set(finished_at)
        self.last_progress = finished_at
        with self._lock:
            if processed.keys() - self._processed.keys():
                self.source.set_watched(processed.keys() | self._processed.keys())
            self._processed.update(processed)
            self.batch_seen = True
        self.refresh_input_lag(finished_at)

    def observe_start(self, offsets: Mapping[TopicPartition, int], now: float) -> None:
        """Where the query starts reading (before its first batch in this process): input lag counts from
        there, so a first batch that never completes still shows the records waiting. Ignored once a batch
        has completed."""
        with self._lock:
            if self.batch_seen or not offsets:
                return
            if offsets.keys() != self._processed.keys():
                self.source.set_watched(offsets.keys())
            self._processed = dict(offsets)
        self.refresh_input_lag(now)

    def observe_previous_progress(self, at: float) -> None:
        """When the query last made progress before this process started (the checkpoint's word, see
        :func:`streaming.driver.progress.checkpoint_progress_time`): the last-batch gauge holds it until the
        query makes progress here, so the series exists from the start. Ignored once progress was seen."""
        if self.last_progress is None:
            self.last_batch.labels(self.cluster).set(at)
            self.last_progress = at

    def observe_idle(self, at: float) -> None:
        """A trigger found no new data: the query is alive and caught up with what it saw."""
        self.last_batch.labels(self.cluster).set(at)
        self.last_progress = at

    def refresh_input_lag(self, now: float) -> None:
        """Input lag from the latest polled log ends (after each batch and each lag refresh)."""
        with self._lock:
            behind = 0
            for (topic, partition), processed in self._processed.items():
                found = self.source.log_range(topic, partition)
                if found is not None:  # below the log start (a -2 "earliest" marker, deleted records): none wait
                    log_start, log_end = found
                    behind += max(0, log_end - max(processed, log_start))
            newest = self._newest_record_s
        self.records_behind = behind
        self.input_lag_records.labels(self.cluster).set(behind)
        seconds = max(0.0, now - newest) if behind and newest else 0.0
        self.input_lag_seconds.labels(self.cluster).set(seconds)

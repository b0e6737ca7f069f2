"""Prometheus exposition of group summaries, lag and job statistics.

:class:`MetricsStore` is a custom collector with its own ``CollectorRegistry``: it keeps
the latest :class:`~streaming.state.GroupSummary` per group (absolute counters taken
from the snapshots, so a job restarted from its checkpoint keeps them), log-end samples
for lag, and the job's own counters, and renders them on each scrape. The batch thread
and the lag poller thread both write to it, hence one lock. Label values are bounded by
groups, members, topics and partitions: nothing per record.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from decoders.records import RECORD_TYPE_NAMES
from streaming.lag import DEFAULT_MAX_SAMPLES, LogEndHistory, TopicPartition, offset_lag
from streaming.state import GroupSummary

# Micro-batches take from sub-second to minutes.
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass
class _JobStats:
    records: Counter[str] = field(default_factory=Counter)
    decode_errors: Counter[str] = field(default_factory=Counter)
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(BATCH_DURATION_BUCKETS) + 1))
    duration_sum: float = 0.0
    input_lag: int | None = None
    last_batch_s: float | None = None
    skipped_offsets: int = 0


class MetricsStore:
    """The exporter's state and its Prometheus collector (see the module docstring)."""

    def __init__(self, cluster: str, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        self.cluster = cluster
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._groups: dict[str, GroupSummary] = {}
        self._history = LogEndHistory(max_samples)
        self._job = _JobStats()
        self._server: WSGIServer | None = None
        self.registry.register(self)

    # -- writers ------------------------------------------------------------------

    def update_groups(self, summaries: Iterable[GroupSummary]) -> None:
        """Replace the summaries of these groups (others are left as they are)."""
        with self._lock:
            for summary in summaries:
                self._groups[summary.group] = summary

    def remove_groups(self, names: Iterable[str]) -> None:
        """Forget deleted or expired groups: their series disappear from the next scrape."""
        with self._lock:
            for name in names:
                self._groups.pop(name, None)
            self._history.retain(self._tracked())

    def set_log_end_offsets(self, log_ends: Mapping[TopicPartition, int], now: float) -> None:
        """Record a log-end sample taken at ``now`` (seconds since the epoch)."""
        with self._lock:
            self._history.record(log_ends, now)
            self._history.retain(self._tracked())

    def add_records(self, counts_by_type: Mapping[int | str, int]) -> None:
        """Count decoded records; integer record types are labelled by Kafka's name."""
        with self._lock:
            for record_type, count in counts_by_type.items():
                label = RECORD_TYPE_NAMES.get(record_type, f"Unknown{record_type}") if isinstance(
                    record_type, int
                ) else record_type
                self._job.records[label] += int(count)

    def add_decode_errors(self, counts_by_reason: Mapping[str, int]) -> None:
        with self._lock:
            for reason, count in counts_by_reason.items():
                self._job.decode_errors[reason] += int(count)

    def add_skipped_offsets(self, count: int) -> None:
        """Count input offsets a batch spanned without a record (compacted away, transaction markers)."""
        with self._lock:
            self._job.skipped_offsets += int(count)

    def observe_batch(
        self, seconds: float, input_lag: int | None = None, timestamp: float | None = None
    ) -> None:
        """Record one micro-batch: its duration, records still unread, and when it ended."""
        with self._lock:
            job = self._job
            job.bucket_counts[bisect.bisect_left(BATCH_DURATION_BUCKETS, seconds)] += 1
            job.duration_sum += seconds
            if input_lag is not None:
                job.input_lag = int(input_lag)
            if timestamp is not None:
                job.last_batch_s = timestamp

    # -- readers ------------------------------------------------------------------

    def group_summaries(self) -> list[GroupSummary]:
        """The summaries currently exported, by group name (the job persists them across restarts)."""
        with self._lock:
            return [self._groups[name] for name in sorted(self._groups)]

    def tracked_partitions(self) -> set[TopicPartition]:
        """Partitions some group has committed offsets for: what the lag poller should fetch."""
        with self._lock:
            return self._tracked()

    def _tracked(self) -> set[TopicPartition]:
        return {(o.topic, o.partition) for s in self._groups.values() for o in s.offsets}

    def serve(self, host: str = "0.0.0.0", port: int = 9108) -> int:
        """Serve ``/metrics`` from a daemon thread; returns the bound port (so 0 works)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return server.server_port

    def close(self) -> None:
        """Stop the HTTP server started by :meth:`serve`."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # -- collector ----------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            groups = [self._groups[name] for name in sorted(self._groups)]
            lag_rows = self._lag_rows(groups)
            log_ends = [(tp, self._history.latest(tp)) for tp in self._history.partitions()]
            job = _JobStats(
                Counter(self._job.records),
                Counter(self._job.decode_errors),
                list(self._job.bucket_counts),
                self._job.duration_sum,
                self._job.input_lag,
                self._job.last_batch_s,
                self._job.skipped_offsets,
            )
        yield from self._group_families(groups)
        yield from self._offset_families(groups, lag_rows, log_ends)
        yield from self._job_families(job)

    def _lag_rows(self, groups: list[GroupSummary]) -> list[tuple[str, str, int, int, float | None]]:
        rows = []
        for summary in groups:
            for o in summary.offsets:
                end = self._history.latest((o.topic, o.partition))
                if end is not None:
                    seconds = self._history.lag_seconds((o.topic, o.partition), o.offset)
                    rows.append((summary.group, o.topic, o.partition, offset_lag(end, o.offset), seconds))
        return rows

    def _family(self, kind: Callable[..., Metric], name: str, doc: str, labels: list[str]) -> Metric:
        return kind(name, doc, labels=["cluster", *labels])

    def _group_families(self, groups: list[GroupSummary]) -> Iterator[Metric]:
        c = self.cluster
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        generation = self._family(
            gauge, "kafka_consumergroup_generation",
            "Classic group generation, or KIP-848 group epoch.", ["group"])
        rebalances = self._family(
            counter, "kafka_consumergroup_rebalances_total",
            "Rebalances seen: generation (classic) or target assignment epoch (KIP-848) changes.", ["group"])
        last_rebalance = self._family(
            gauge, "kafka_consumergroup_last_rebalance_timestamp_seconds",
            "Time of the group's last rebalance.", ["group"])
        members = self._family(
            gauge, "kafka_consumergroup_members", "Members in the group.", ["group"])
        info = self._family(
            gauge, "kafka_consumergroup_info",
            "Group description; always 1. Leader is the classic leader's instance id or member id.",
            ["group", "group_type", "protocol_type", "protocol", "leader"])
        state = self._family(
            gauge, "kafka_consumergroup_state",
            "1 for the group's current state (Empty, Stable, Assigning, Reconciling).", ["group", "state"])
        assigned = self._family(
            gauge, "kafka_consumergroup_assigned_partitions",
            "Partitions assigned to the group's members (KIP-848: current assignments).", ["group"])
        member_assigned = self._family(
            gauge, "kafka_consumergroup_member_assigned_partitions",
            "Partitions assigned to one member; member is the instance id of static members, "
            "else the member id.", ["group", "member", "client_id", "client_host"])
        imbalance = self._family(
            gauge, "kafka_consumergroup_assignment_imbalance_ratio",
            "Busiest member's partitions over the mean per member; 1 is even.", ["group"])
        moved = self._family(
            counter, "kafka_consumergroup_partitions_moved_total",
            "Partitions whose owner changed across rebalances.", ["group"])
        commits = self._family(
            counter, "kafka_consumergroup_offset_commits_total",
            "Offset commit records written for the group.", ["group"])
        for s in groups:
            g = s.group
            if s.generation is not None:
                generation.add_metric([c, g], s.generation)
            rebalances.add_metric([c, g], s.rebalances_total)
            if s.last_rebalance_ms is not None:
                last_rebalance.add_metric([c, g], s.last_rebalance_ms / 1000)
            members.add_metric([c, g], s.member_count)
            info.add_metric([c, g, s.group_type, s.protocol_type, s.protocol, s.leader], 1)
            state.add_metric([c, g, s.state], 1)
            assigned.add_metric([c, g], s.assigned_partitions)
            for m in s.members:
                member_labels = [c, g, m.member, m.client_id, m.client_host]
                member_assigned.add_metric(member_labels, m.assigned_partitions)
            if s.imbalance_ratio is not None:
                imbalance.add_metric([c, g], s.imbalance_ratio)
            moved.add_metric([c, g], s.partitions_moved_total)
            commits.add_metric([c, g], s.offset_commits_total)
        yield from (generation, rebalances, last_rebalance, members, info, state, assigned,
                    member_assigned, imbalance, moved, commits)

    def _offset_families(
        self,
        groups: list[GroupSummary],
        lag_rows: list[tuple[str, str, int, int, float | None]],
        log_ends: list[tuple[TopicPartition, int | None]],
    ) -> Iterator[Metric]:
        c = self.cluster
        labels = ["group", "topic", "partition"]
        committed = self._family(
            GaugeMetricFamily, "kafka_consumergroup_committed_offset",
            "Latest committed offset (the next record the group will read).", labels)
        lag = self._family(
            GaugeMetricFamily, "kafka_consumergroup_lag",
            "Records between the committed offset and the log end.", labels)
        lag_seconds = self._family(
            GaugeMetricFamily, "kafka_consumergroup_lag_seconds",
            "Estimated seconds since the log end was at the committed offset "
            "(interpolated from sampled log-end offsets).", labels)
        log_end = self._family(
            GaugeMetricFamily, "kafka_topic_partition_log_end_offset",
            "Latest sampled log-end offset of a partition some group commits to.", ["topic", "partition"])
        for s in groups:
            for o in s.offsets:
                committed.add_metric([c, s.group, o.topic, str(o.partition)], o.offset)
        for group, topic, partition, records, seconds in lag_rows:
            lag.add_metric([c, group, topic, str(partition)], records)
            if seconds is not None:
                lag_seconds.add_metric([c, group, topic, str(partition)], seconds)
        for (topic, partition), end in log_ends:
            if end is not None:
                log_end.add_metric([c, topic, str(partition)], end)
        yield from (committed, lag, lag_seconds, log_end)

    def _job_families(self, job: _JobStats) -> Iterator[Metric]:
        c = self.cluster
        records = self._family(
            CounterMetricFamily, "rebalance_monitor_records_total",
            "__consumer_offsets records decoded, by record type.", ["record_type"])
        for record_type, count in sorted(job.records.items()):
            records.add_metric([c, record_type], count)
        errors = self._family(
            CounterMetricFamily, "rebalance_monitor_decode_errors_total",
            "__consumer_offsets records that could not be decoded, by reason.", ["reason"])
        for reason, count in sorted(job.decode_errors.items()):
            errors.add_metric([c, reason], count)
        skipped = self._family(
            CounterMetricFamily, "rebalance_monitor_skipped_offsets_total",
            "__consumer_offsets offsets spanned by batches without a record "
            "(compacted away, transaction markers, aborted commits).", [])
        skipped.add_metric([c], job.skipped_offsets)
        duration = self._family(
            HistogramMetricFamily, "rebalance_monitor_batch_duration_seconds",
            "Wall time of one streaming micro-batch.", [])
        cumulative, buckets = 0, []
        for bound, count in zip((*BATCH_DURATION_BUCKETS, float("inf")), job.bucket_counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        duration.add_metric([c], buckets, job.duration_sum)
        input_lag = self._family(
            GaugeMetricFamily, "rebalance_monitor_input_lag_records",
            "__consumer_offsets records not yet processed after the last batch.", [])
        if job.input_lag is not None:
            input_lag.add_metric([c], job.input_lag)
        last_batch = self._family(
            GaugeMetricFamily, "rebalance_monitor_last_batch_timestamp_seconds",
            "When the last micro-batch finished.", [])
        if job.last_batch_s is not None:
            last_batch.add_metric([c], job.last_batch_s)
        yield from (records, errors, skipped, duration, input_lag, last_batch)

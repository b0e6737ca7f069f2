"""The Prometheus endpoint: group series from cached text, the job's own metrics from prometheus_client.

Group series mirror state the job keeps elsewhere, so they are rendered to text when a group
changes (and lag series when log ends are polled) and a scrape only joins cached bytes (see
:mod:`streaming.exposition`). The job's own counters, gauges and histogram are ordinary
prometheus_client metrics in :attr:`Exporter.registry`. Label values are bounded by groups,
members, topics and partitions (nothing per record); ``--max-series`` caps the group series
and ``rebalance_monitor_series_dropped`` says how many a scrape left out.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from decoders.records import RECORD_TYPE_NAMES
from streaming.exposition import Family, FamilyCache, Lines, TopicPartition
from streaming.groups import GroupOffsets
from streaming.lag import LagTracker
from streaming.state import GroupSummary

disable_created_metrics()  # one *_created series per counter child doubles the job's lines for nothing used

# Micro-batches take from a fraction of a second to minutes.
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
LAG_GRANULARITIES = ("partition", "topic")

G, C = "gauge", "counter"
GROUP_FAMILIES = (
    Family("kafka_consumergroup_generation", G, "Classic group generation, or KIP-848 group epoch."),
    Family("kafka_consumergroup_rebalances_total", C,
           "Rebalances seen: generation (classic) or target assignment epoch (KIP-848) changes."),
    Family("kafka_consumergroup_last_rebalance_timestamp_seconds", G, "Time of the group's last rebalance."),
    Family("kafka_consumergroup_members", G, "Members in the group."),
    Family("kafka_consumergroup_info", G,
           "Group description; always 1. Leader is the classic leader's instance id or member id."),
    Family("kafka_consumergroup_state", G, "1 for the group's current state (Empty, Stable, Assigning, Reconciling)."),
    Family("kafka_consumergroup_assigned_partitions", G,
           "Partitions assigned to the group's members (KIP-848: current assignments)."),
    Family("kafka_consumergroup_member_assigned_partitions", G,
           "Partitions assigned to one member; member is the instance id of static members, else the member id."),
    Family("kafka_consumergroup_assignment_imbalance_ratio", G,
           "Busiest member's partitions over the mean per member; 1 is even."),
    Family("kafka_consumergroup_partitions_moved_total", C, "Partitions whose owner changed across rebalances."),
    Family("kafka_consumergroup_offset_commits_total", C, "Offset commit records written for the group."),
)
OFFSET_FAMILIES = (
    Family("kafka_consumergroup_committed_offset", G,
           "Latest committed offset (the next record the group will read); --lag-granularity partition only."),
)
LAG_FAMILIES = (
    Family("kafka_consumergroup_lag", G,
           "Records between the committed offset and the log end; --lag-granularity partition only."),
    Family("kafka_consumergroup_lag_seconds", G,
           "Seconds since the record at the committed offset (the next one the group reads) was written; "
           "method=timestamp read from that record, interpolated where it is gone; --lag-granularity partition only."),
    Family("kafka_consumergroup_topic_total_lag", G, "Sum of the group's lag over a topic's partitions."),
    Family("kafka_consumergroup_topic_max_lag", G, "Largest lag of the group on one partition of a topic."),
    Family("kafka_consumergroup_topic_max_lag_seconds", G, "Largest lag in seconds of the group on a topic."),
    Family("kafka_consumergroup_total_lag", G, "Sum of the group's lag over every partition it committed."),
    Family("kafka_consumergroup_max_lag", G, "Largest lag of the group on one partition."),
    Family("kafka_consumergroup_max_lag_seconds", G, "Largest lag in seconds of the group on one partition."),
)
LOG_END_FAMILY = Family("kafka_topic_partition_log_end_offset", G,
                        "Latest sampled log-end offset of a partition some group commits to.")
POLL_TIMESTAMP_FAMILY = Family("rebalance_monitor_log_end_poll_timestamp_seconds", G,
                               "When the lag poller last fetched log offsets; lag series go once it is stale.")
POLL_ERRORS_FAMILY = Family("rebalance_monitor_log_end_poll_errors_total", C,
                            "Lag poller failures by reason (a partition or a whole round).")
OFFSETS_TOPIC_GAP_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_offsets", G,
                                  "High watermark minus last stable offset of an offsets-topic partition: records "
                                  "a read_committed reader (this job) cannot see yet because a transaction is open.")
OFFSETS_TOPIC_STUCK_FAMILY = Family("rebalance_monitor_offsets_topic_unstable_seconds", G,
                                    "How long an offsets-topic partition's last stable offset has been held back.")
_SUMMARY_NAMES = [f.name for f in GROUP_FAMILIES]
_OFFSET_NAMES = [f.name for f in OFFSET_FAMILIES]
_LAG_NAMES = [f.name for f in LAG_FAMILIES]
_F = {f.name: f for f in (*GROUP_FAMILIES, *OFFSET_FAMILIES, *LAG_FAMILIES)}


class Exporter:
    """Group series (cached text), lag from polled log ends, and the job's own metrics."""

    def __init__(self, cluster: str, lag: LagTracker, lag_granularity: str = "partition",
                 max_series: int | None = None) -> None:
        if lag_granularity not in LAG_GRANULARITIES:
            raise ValueError(f"lag granularity must be one of {LAG_GRANULARITIES}, got {lag_granularity!r}")
        self.cluster = cluster
        self.per_partition = lag_granularity == "partition"
        self.max_series = max_series
        self._lock = threading.Lock()
        self._cache = FamilyCache((*GROUP_FAMILIES, *OFFSET_FAMILIES, *LAG_FAMILIES))
        self._offsets: dict[str, dict[TopicPartition, int]] = {}
        self.lag = lag
        self._log_end_text = b""
        self._lag_rendered_at = 0.0
        self._lag_round: float | None = None
        self._stop = threading.Event()
        self._processed: dict[TopicPartition, int] = {}
        self._server: WSGIServer | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self._job_metrics()

    def _job_metrics(self) -> None:
        r, cluster = self.registry, ["cluster"]
        self.records = Counter("rebalance_monitor_records", "__consumer_offsets records decoded, by record type.",
                               [*cluster, "record_type"], registry=r)
        self.decode_errors = Counter("rebalance_monitor_decode_errors",
                                     "__consumer_offsets records that could not be decoded, by reason.",
                                     [*cluster, "reason"], registry=r)
        self.skipped_offsets = Counter("rebalance_monitor_skipped_offsets",
                                       "__consumer_offsets offsets spanned by batches without a record "
                                       "(compacted away, transaction markers, aborted commits).", cluster, registry=r)
        self.batch_duration = Histogram("rebalance_monitor_batch_duration_seconds",
                                        "Wall time of one streaming micro-batch.", cluster,
                                        buckets=BATCH_DURATION_BUCKETS, registry=r)
        self.input_lag_records = Gauge("rebalance_monitor_input_lag_records",
                                       "Records of the source topic not yet processed: its polled log-end "
                                       "offsets minus the offsets the last batch ended at.", cluster, registry=r)
        self.input_lag_seconds = Gauge("rebalance_monitor_input_lag_seconds",
                                       "How far behind the source topic the job is in time: now minus the "
                                       "newest processed record's timestamp while records remain unread, else 0.",
                                       cluster, registry=r)
        self.last_batch = Gauge("rebalance_monitor_last_batch_timestamp_seconds",
                                "When the query last made progress: a micro-batch finished, or a trigger found "
                                "no new data (caught up).", cluster, registry=r)
        self.groups_gauge = Gauge("rebalance_monitor_groups", "Groups the job currently exports.", cluster, registry=r)
        self.series_gauge = Gauge("rebalance_monitor_series", "Group series in the last scrape.", cluster, registry=r)
        self.series_dropped = Gauge("rebalance_monitor_series_dropped",
                                    "Group series left out of the last scrape by --max-series.", cluster, registry=r)
        self._newest_record_s: float | None = None
        self.records_behind: int | None = None

    # -- writers (the batch thread) -------------------------------------------------

    def update_group(self, summary: GroupSummary, offsets: GroupOffsets | None) -> None:
        """Re-render one group's series from its summary and committed offsets."""
        committed = {tp: entry.offset for tp, entry in offsets.offsets.items()} if offsets else {}
        lines = Lines(self.cluster)
        _summary_lines(lines, summary, offsets.commits_total if offsets else 0)
        if self.per_partition:
            for (topic, partition), offset in sorted(committed.items()):
                lines.add(_F["kafka_consumergroup_committed_offset"],
                          (("group", summary.group), ("topic", topic), ("partition", str(partition))), offset)
        with self._lock:
            self._offsets[summary.group] = committed
            self._lag_lines(lines, summary.group, committed)
            self._cache.put(summary.group, lines, (*_SUMMARY_NAMES, *_OFFSET_NAMES, *_LAG_NAMES))

    def remove_group(self, group: str) -> None:
        """Forget a deleted or expired group: its series leave the next scrape."""
        with self._lock:
            self._cache.remove(group)
            self._offsets.pop(group, None)

    def count_records(self, by_type: Mapping[int, int], newest_record_ms: int | None = None) -> None:
        for record_type, count in by_type.items():
            self.records.labels(self.cluster, RECORD_TYPE_NAMES.get(record_type, f"Unknown{record_type}")).inc(count)
        if newest_record_ms:
            with self._lock:
                self._newest_record_s = max(self._newest_record_s or 0.0, newest_record_ms / 1000)

    def count_decode_errors(self, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            self.decode_errors.labels(self.cluster, reason).inc(count)

    def observe_batch(self, seconds: float, skipped_offsets: int, processed: Mapping[TopicPartition, int],
                      finished_at: float) -> None:
        """One micro-batch's progress: duration, offsets spanned without a record, where it ended."""
        self.batch_duration.labels(self.cluster).observe(seconds)
        self.skipped_offsets.labels(self.cluster).inc(skipped_offsets)
        self.last_batch.labels(self.cluster).set(finished_at)
        with self._lock:
            self._processed.update(processed)
            self._update_input_lag(finished_at)

    def observe_idle(self, at: float) -> None:
        """A trigger found no new data: the query is alive and caught up with what it saw."""
        self.last_batch.labels(self.cluster).set(at)

    # -- lag (its own thread) -----------------------------------------------------------

    def refresh_lag(self, now: float | None = None) -> None:
        """Tell the tracker what to poll and re-render every group's lag series from it.

        Runs after each poll round, and in between often enough that a series whose log-end
        sample goes stale leaves the next scrape instead of showing an old number.
        """
        now = time.time() if now is None else now
        with self._lock:
            committed = {(t, p, o) for offsets in self._offsets.values() for (t, p), o in offsets.items()}
            source = set(self._processed)
        self.lag.set_wanted(committed, source)
        with self._lock:
            for group, offsets in self._offsets.items():
                lines = Lines(self.cluster)
                self._lag_lines(lines, group, offsets)
                self._cache.put(group, lines, _LAG_NAMES)
            ends = Lines(self.cluster)
            for topic, partition in sorted({(t, p) for t, p, _ in committed}):
                found = self.lag.lag_uncommitted(topic, partition)
                if found is not None:
                    ends.add(LOG_END_FAMILY, (("topic", topic), ("partition", str(partition))), found.log_end)
            self._log_end_text = ends.encoded().get(LOG_END_FAMILY.name, b"")
            self._update_input_lag(now)
            self._lag_rendered_at, self._lag_round = now, self.lag.last_round_at()

    def _lag_loop(self, period_s: float) -> None:
        while not self._stop.wait(1.0):
            now = time.time()
            if self.lag.last_round_at() != self._lag_round or now - self._lag_rendered_at >= period_s:
                self.refresh_lag(now)

    def start_lag_refresh(self) -> None:
        """Re-render lag after every poll round and at least every third of the staleness limit."""
        period = max(1.0, self.lag.stale_after_s / 3)
        threading.Thread(target=self._lag_loop, args=(period,), daemon=True, name="lag-render").start()

    # -- readers ----------------------------------------------------------------------

    def group_text(self, group: str) -> bytes:
        """The text a scrape serves for one group (what the latency benchmark watches)."""
        with self._lock:
            return self._cache.group_text(group)

    def render(self) -> bytes:
        with self._lock:
            chunks, kept, dropped = self._cache.render(self.max_series)
            log_ends = self._log_end_text
            self.groups_gauge.labels(self.cluster).set(len(self._offsets))
        self.series_gauge.labels(self.cluster).set(kept)
        self.series_dropped.labels(self.cluster).set(dropped)
        return b"".join([*chunks, LOG_END_FAMILY.header, log_ends, self._poller_text(), generate_latest(self.registry)])

    def _poller_text(self) -> bytes:
        """The lag poller's health and the offsets topic's open transactions (state the tracker keeps)."""
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
        chunks = [POLL_TIMESTAMP_FAMILY.header]
        if last_round is not None:
            chunks.append(f'{POLL_TIMESTAMP_FAMILY.name}{{{lines.prefix}}} {last_round!r}\n'.encode())
        for family in (POLL_ERRORS_FAMILY, OFFSETS_TOPIC_GAP_FAMILY, OFFSETS_TOPIC_STUCK_FAMILY):
            chunks += [family.header, text.get(family.name, b"")]
        return b"".join(chunks)

    # -- internals ----------------------------------------------------------------------

    def _lag_lines(self, lines: Lines, group: str, committed: Mapping[TopicPartition, int]) -> None:
        """Per-partition lag (partition granularity) and per-topic / per-group aggregates.

        A partition without a fresh log-end sample has no lag series (never a stale number).
        """
        per_topic: dict[str, list[tuple[int, float | None]]] = {}
        for (topic, partition), offset in sorted(committed.items()):
            found = self.lag.lag(topic, partition, offset)
            if found is None:
                continue
            lag = max(0, found.lag)
            per_topic.setdefault(topic, []).append((lag, found.seconds))
            if self.per_partition:
                labels = (("group", group), ("topic", topic), ("partition", str(partition)))
                lines.add(_F["kafka_consumergroup_lag"], labels, lag)
                if found.seconds is not None:
                    lines.add(_F["kafka_consumergroup_lag_seconds"], (*labels, ("method", found.seconds_method or "")),
                              found.seconds)
        everything: list[tuple[int, float | None]] = []
        for topic, rows in per_topic.items():
            labels = (("group", group), ("topic", topic))
            _aggregates(lines, labels, rows, "kafka_consumergroup_topic_")
            everything.extend(rows)
        if everything:
            _aggregates(lines, (("group", group),), everything, "kafka_consumergroup_")

    def _update_input_lag(self, now: float) -> None:
        behind = 0
        for (topic, partition), processed in self._processed.items():
            found = self.lag.lag_uncommitted(topic, partition)
            if found is not None:
                behind += max(0, found.log_end - processed)
        self.records_behind = behind
        self.input_lag_records.labels(self.cluster).set(behind)
        seconds = max(0.0, now - self._newest_record_s) if behind and self._newest_record_s else 0.0
        self.input_lag_seconds.labels(self.cluster).set(seconds)

    # -- serving ------------------------------------------------------------------------

    def serve(self, host: str = "0.0.0.0", port: int = 0) -> int:
        """Serve ``/metrics`` from a daemon thread; returns the bound port (so 0 works)."""
        server = make_server(host, port, self._wsgi, _ThreadingServer, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http").start()
        self._server = server
        return server.server_port

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics serves the metrics\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"read-only endpoint\n"]
        started = time.monotonic()
        body = self.render()
        headers = [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        headers.append(("X-Render-Seconds", f"{time.monotonic() - started:.3f}"))
        start_response("200 OK", headers)
        return [body]

    def close(self) -> None:
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _summary_lines(lines: Lines, s: GroupSummary, commits_total: int) -> None:
    g = (("group", s.group),)
    if s.generation is not None:
        lines.add(_F["kafka_consumergroup_generation"], g, s.generation)
    lines.add(_F["kafka_consumergroup_rebalances_total"], g, s.rebalances_total)
    if s.last_rebalance_ms is not None:
        lines.add(_F["kafka_consumergroup_last_rebalance_timestamp_seconds"], g, s.last_rebalance_ms / 1000)
    lines.add(_F["kafka_consumergroup_members"], g, s.member_count)
    lines.add(_F["kafka_consumergroup_info"], (*g, ("group_type", s.group_type), ("protocol_type", s.protocol_type),
                                              ("protocol", s.protocol), ("leader", s.leader)), 1)
    lines.add(_F["kafka_consumergroup_state"], (*g, ("state", s.state)), 1)
    lines.add(_F["kafka_consumergroup_assigned_partitions"], g, s.assigned_partitions)
    for m in s.members:
        lines.add(_F["kafka_consumergroup_member_assigned_partitions"],
                  (*g, ("member", m.member), ("client_id", m.client_id), ("client_host", m.client_host)),
                  m.assigned_partitions)
    if s.imbalance_ratio is not None:
        lines.add(_F["kafka_consumergroup_assignment_imbalance_ratio"], g, s.imbalance_ratio)
    lines.add(_F["kafka_consumergroup_partitions_moved_total"], g, s.partitions_moved_total)
    lines.add(_F["kafka_consumergroup_offset_commits_total"], g, commits_total)


def _aggregates(lines: Lines, labels: tuple[tuple[str, str], ...], rows: list[tuple[int, float | None]],
                prefix: str) -> None:
    lags = [lag for lag, _ in rows]
    lines.add(_F[f"{prefix}total_lag"], labels, sum(lags))
    lines.add(_F[f"{prefix}max_lag"], labels, max(lags))
    seconds = [s for _, s in rows if s is not None]
    if seconds:
        lines.add(_F[f"{prefix}max_lag_seconds"], labels, max(seconds))

"""The Prometheus endpoint: group series from cached text, the job's own metrics from prometheus_client.

Group series mirror state the job keeps elsewhere, so they are rendered to text when a group
changes (and lag series when log ends are polled) and a scrape only joins cached bytes (see
:mod:`streaming.exposition`). The job's own counters, gauges and histogram are ordinary
prometheus_client metrics in :attr:`Exporter.registry`. Label values are bounded by groups,
members, topics and partitions (nothing per record); ``--max-series`` caps the group series
and ``rebalance_monitor_series_dropped`` says how many a scrape left out.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from decoders.records import RECORD_TYPE_NAMES
from streaming import metrics_server
from streaming.advisor_pass import AdvisorPass
from streaming.exposition import Family, FamilyCache, Lines, TopicPartition, escape, number
from streaming.groups import GroupOffsets
from streaming.lag import LagTracker
from streaming.options import LAG_GRANULARITIES
from streaming.state import DURATION_BUCKET_LABELS, GroupSummary

disable_created_metrics()  # one *_created series per counter child doubles the job's lines for nothing used

# Micro-batches take from a fraction of a second to minutes.
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

G, C = "gauge", "counter"
GROUP_FAMILIES = (
    Family("kafka_consumergroup_generation", G, "Classic group generation, or KIP-848 group epoch."),
    Family("kafka_consumergroup_rebalances_total", C,
           "Rebalances: completed assignments with a member whose generation (classic) or target assignment "
           "epoch (KIP-848) changed. Group creation is a baseline; going Empty and re-creation are counted apart."),
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
    Family("kafka_consumergroup_empty_transitions_total", C,
           "Times the group went Empty (its last members left); not counted as rebalances."),
    Family("kafka_consumergroup_recreations_total", C,
           "Times the group was deleted and created again (tombstone, or a generation going down): a new baseline."),
    Family("kafka_consumergroup_generations_advanced_total", C,
           "Raw sum of the generation (classic) or group epoch (KIP-848) steps Kafka took."),
    Family("kafka_consumergroup_rebalance_causes_total", C,
           "Rebalances by cause; one rebalance may have several causes (see the README)."),
    Family("kafka_consumergroup_member_departures_total", C,
           "Members that left, by how (inferred from their last commit against their timeouts; see the README)."),
    Family("kafka_consumergroup_member_churn", G,
           "Joins plus leaves of one client in the hour before the group's last change (top 10 per group)."),
    Family("kafka_consumergroup_rebalance_duration_seconds", "histogram",
           "Measurable part of each rebalance: classic = the sync phase (from the end of the join phase to the "
           "leader's assignment being stored; records of Kafka 2.1+); KIP-848 = from the group epoch bump to the "
           "target assignment catching up (members' reconciliation after it not included)."),
)
# Written by the advisor pass's thread (streaming/advisor_pass.py), not with the group's other series.
ADVISOR_FAMILY = Family("kafka_consumergroup_assignor_imbalance_ratio", G,
                        "Imbalance (busiest member over the mean) that each of Kafka's built-in assignors would give "
                        "the classic group's current members and subscriptions; evaluated in the background, so it "
                        "can trail a rebalance by a few seconds.")
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
    Family("kafka_consumergroup_lag_uncommitted", G,
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
        self._cache = FamilyCache((*GROUP_FAMILIES, ADVISOR_FAMILY, *OFFSET_FAMILIES, *LAG_FAMILIES))
        self.advisor: AdvisorPass | None = None  # set by the job: fed each group's change, publishes back
        self._offsets: dict[str, dict[TopicPartition, int]] = {}
        self._owned: dict[str, dict[tuple[tuple[str, str], ...], list[TopicPartition]]] = {}
        self._truncated: dict[str, set[tuple[TopicPartition, int]]] = {}
        self._truncations: dict[str, dict[str, int]] = {}
        self._has_lag: set[str] = set()  # groups whose cached text holds lag lines
        self._batch_active = threading.Event()  # a batch is being folded: lag refresh waits
        self._wanted_dirty = True  # the tracker's wanted partitions need a new set_wanted
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
        self.groups_dropped = Gauge("rebalance_monitor_groups_dropped",
                                    "New groups the last batch turned away by --max-groups (not tracked).", cluster,
                                    registry=r)
        self.members_dropped = Gauge("rebalance_monitor_members_dropped",
                                     "Member series left out by --max-members-per-group, over every group.", cluster,
                                     registry=r)
        self.limit_hits = Counter("rebalance_monitor_limit_hits",
                                  "Times a limit turned something away: max_groups, once per new group and batch; "
                                  "max_members_per_group, once per render of a group whose member series it cut.",
                                  [*cluster, "limit"], registry=r)
        self.query_restarts = Counter("rebalance_monitor_query_restarts",
                                      "Times the streaming query failed and the job started it again from its "
                                      "checkpoint.", cluster, registry=r)
        self.query_restarts.labels(self.cluster)  # 0 from the start: increase() sees the first restart
        self._newest_record_s: float | None = None
        self.records_behind: int | None = None
        self.last_progress: float | None = None  # what last_batch holds, for the job's restart decisions

    # -- writers (the batch thread) -------------------------------------------------

    def update_group(self, summary: GroupSummary, offsets: GroupOffsets | None,
                     assignments: Mapping[str, list[TopicPartition]] | None = None) -> None:
        """Re-render one group's series from its summary, committed offsets and members' partitions."""
        committed = {tp: entry.offset for tp, entry in offsets.offsets.items()} if offsets else {}
        lines = Lines(self.cluster)
        _summary_lines(lines, summary, offsets.commits_total if offsets else 0)
        if self.per_partition:
            lines.add_many(_F["kafka_consumergroup_committed_offset"], (("group", summary.group),),
                           sorted(committed.items()))
        members = {m.member: (("member", m.member), ("client_id", m.client_id), ("client_host", m.client_host))
                   for m in summary.members}
        owned = {members[owner]: parts for owner, parts in (assignments or {}).items() if owner in members}
        with self._lock:
            if committed != self._offsets.get(summary.group) or owned != self._owned.get(summary.group):
                self._wanted_dirty = True
            self._offsets[summary.group] = committed
            self._owned[summary.group] = owned
            self._lag_lines(lines, summary.group, committed)
            self._cache.put(summary.group, lines, (*_SUMMARY_NAMES, *_OFFSET_NAMES, *_LAG_NAMES))
        if self.advisor is not None:  # outside the lock: the advisor's thread publishes under it
            self.advisor.offer(summary, assignments)

    def remove_group(self, group: str) -> None:
        """Forget a deleted or expired group: its series leave the next scrape."""
        with self._lock:
            self._cache.remove(group)
            for state in (self._offsets, self._owned, self._truncated, self._truncations):
                state.pop(group, None)
            self._has_lag.discard(group)
            self._wanted_dirty = True
        if self.advisor is not None:
            self.advisor.forget(group)

    def publish_advice(self, group: str, ratios: Mapping[str, float] | None) -> None:
        """The advisor pass's imbalance per assignor for ``group`` (None: its series go)."""
        lines = Lines(self.cluster)
        for assignor, ratio in sorted((ratios or {}).items()):
            lines.add(ADVISOR_FAMILY, (("group", group), ("assignor", assignor)), ratio)
        with self._lock:
            if group in self._offsets:  # removed meanwhile: publish nothing
                self._cache.put(group, lines, (ADVISOR_FAMILY.name,))

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

    def observe_batch(self, seconds: float, skipped_offsets: int, processed: Mapping[TopicPartition, int],
                      finished_at: float) -> None:
        """One micro-batch's progress: duration, offsets spanned without a record, where it ended."""
        self.batch_duration.labels(self.cluster).observe(seconds)
        self.skipped_offsets.labels(self.cluster).inc(skipped_offsets)
        self.last_batch.labels(self.cluster).set(finished_at)
        self.last_progress = finished_at
        with self._lock:
            if processed.keys() - self._processed.keys():
                self._wanted_dirty = True
            self._processed.update(processed)
            self._update_input_lag(finished_at)

    def observe_idle(self, at: float) -> None:
        """A trigger found no new data: the query is alive and caught up with what it saw."""
        self.last_batch.labels(self.cluster).set(at)
        self.last_progress = at

    # -- lag (its own thread) -----------------------------------------------------------

    def refresh_lag(self, now: float | None = None) -> None:
        """Tell the tracker what to poll and re-render the lag series that can have changed.

        Runs after each poll round, and in between often enough that a series whose log-end
        sample goes stale leaves the next scrape instead of showing an old number. Groups
        none of whose partitions has a sample, and which show no lag now, are skipped.
        """
        now = time.time() if now is None else now
        with self._lock:
            wanted = None
            if self._wanted_dirty:
                committed = {(t, p, o) for offsets in self._offsets.values() for (t, p), o in offsets.items()}
                uncommitted = {tp for group, owned in self._owned.items() for parts in owned.values() for tp in parts
                               if tp not in self._offsets.get(group, {})}
                wanted = committed, uncommitted | set(self._processed)
                self._wanted_dirty = False
        if wanted is not None:
            self.lag.set_wanted(*wanted)
        sampled = self.lag.sampled_at()
        with self._lock:
            groups = list(self._offsets.items())
        for group, offsets in groups:
            # The lock is taken per group: a batch's update_group calls interleave instead of
            # waiting for a whole pass over every partition.
            with self._lock:
                if self._offsets.get(group) is not offsets:
                    continue  # changed or removed meanwhile: update_group rendered it afresh
                owned = self._owned.get(group, {})
                if group not in self._has_lag and not any(tp in sampled for tp in offsets) and not any(
                        tp in sampled for parts in owned.values() for tp in parts):
                    continue
                lines = Lines(self.cluster)
                self._lag_lines(lines, group, offsets)
                self._cache.put(group, lines, _LAG_NAMES)
        with self._lock:
            ends = Lines(self.cluster)
            grouped = {tp for offsets in self._offsets.values() for tp in offsets}
            grouped.update(tp for owned in self._owned.values() for parts in owned.values() for tp in parts)
            for topic, partition in sorted(tp for tp in grouped if tp in sampled):
                found = self.lag.lag_uncommitted(topic, partition)
                if found is not None:
                    ends.add(LOG_END_FAMILY, (("topic", topic), ("partition", str(partition))), found.log_end)
            self._log_end_text = ends.encoded().get(LOG_END_FAMILY.name, b"")
            self._update_input_lag(now)
            self._lag_rendered_at, self._lag_round = now, self.lag.last_round_at()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around a batch's fold: the lag refresh waits rather than contend for the lock and the GIL
        (at 100,000 groups the two threads handing the lock back and forth doubled the fold)."""
        self._batch_active.set()
        try:
            yield
        finally:
            self._batch_active.clear()

    def _lag_loop(self, period_s: float) -> None:
        while not self._stop.wait(1.0):
            if self._batch_active.is_set():
                continue
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
                lines.add(_F["kafka_consumergroup_lag"], labels, max(0, lag.lag))
                if lag.seconds is not None:
                    lines.add(_F["kafka_consumergroup_lag_seconds"], (*labels, ("method", lag.seconds_method or "")),
                              lag.seconds)
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
                    lines.add(_F["kafka_consumergroup_lag_uncommitted"],
                              (("group", group), ("topic", topic), ("partition", str(partition))), max(0, lag.lag))
        everything: list[tuple[int, float | None]] = []
        for topic, rows in per_topic.items():
            labels = (("group", group), ("topic", topic))
            _aggregates(lines, labels, rows, "kafka_consumergroup_topic_")
            everything.extend(rows)
        if everything:
            _aggregates(lines, (("group", group),), everything, "kafka_consumergroup_")
        for member_labels, parts in owned.items():
            rows = [found[tp] for tp in parts if tp in found]
            if rows:
                labels = (("group", group), *member_labels)
                lines.add(_F["kafka_consumergroup_member_lag"], labels, sum(lag for lag, _ in rows))
                seconds = [s for _, s in rows if s is not None]
                if seconds:
                    lines.add(_F["kafka_consumergroup_member_lag_seconds"], labels, max(seconds))
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

    def serve(self, host: str = "0.0.0.0", port: int = 0, *, tls_cert: Path | None = None,
              tls_key: Path | None = None, basic_auth_file: Path | None = None) -> int:
        """Serve ``/metrics`` (see :mod:`streaming.metrics_server`); returns the bound port (so 0 works)."""
        self._server = metrics_server.serve(self.render, host, port, tls_cert=tls_cert, tls_key=tls_key,
                                            basic_auth_file=basic_auth_file)
        return self._server.server_port

    def close(self) -> None:
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


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
    lines.add(_F["kafka_consumergroup_empty_transitions_total"], g, s.empty_transitions_total)
    lines.add(_F["kafka_consumergroup_recreations_total"], g, s.recreations_total)
    lines.add(_F["kafka_consumergroup_generations_advanced_total"], g, s.generations_advanced_total)
    for cause, count in sorted(s.rebalance_causes.items()):
        lines.add(_F["kafka_consumergroup_rebalance_causes_total"], (*g, ("cause", cause)), count)
    for how, count in sorted(s.departures.items()):
        lines.add(_F["kafka_consumergroup_member_departures_total"], (*g, ("how", how)), count)
    for churn in s.member_churn:
        lines.add(_F["kafka_consumergroup_member_churn"],
                  (*g, ("client_id", churn.client_id), ("client_host", churn.client_host)), churn.count)
    if s.rebalance_durations:
        _histogram(lines, _F["kafka_consumergroup_rebalance_duration_seconds"], g, s.rebalance_durations,
                   s.rebalance_duration_sum_ms / 1000)


def _histogram(lines: Lines, family: Family, labels: tuple[tuple[str, str], ...], cumulative: tuple[int, ...],
               total: float) -> None:
    """A histogram's _bucket/_sum/_count lines under ``family`` (cumulative counts per DURATION_BUCKET_LABELS)."""
    head = ",".join([f'{k}="{escape(v)}"' for k, v in labels])
    rows = lines.by_family.setdefault(family.name, [])
    for le, count in zip(DURATION_BUCKET_LABELS, cumulative, strict=True):
        rows.append(f'{family.name}_bucket{{{lines.prefix},{head},le="{le}"}} {count}\n')
    rows.append(f"{family.name}_sum{{{lines.prefix},{head}}} {number(total)}\n")
    rows.append(f"{family.name}_count{{{lines.prefix},{head}}} {cumulative[-1]}\n")
    lines.count += len(cumulative) + 2


def _aggregates(lines: Lines, labels: tuple[tuple[str, str], ...], rows: list[tuple[int, float | None]],
                prefix: str) -> None:
    lags = [lag for lag, _ in rows]
    lines.add(_F[f"{prefix}total_lag"], labels, sum(lags))
    lines.add(_F[f"{prefix}max_lag"], labels, max(lags))
    seconds = [s for _, s in rows if s is not None]
    if seconds:
        lines.add(_F[f"{prefix}max_lag_seconds"], labels, max(seconds))

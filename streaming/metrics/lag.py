"""Lag series: pure functions from the lag book's rows (:mod:`streaming.lag.book`) to exposition lines.

:func:`lag_lines` renders one group's :class:`~streaming.lag.book.GroupLag` (per partition, per
topic, per group and per member, the retention series and the health verdict); :func:`log_end_text`
the sampled log ends a refresh found; :func:`poller_text` the lag poller's own health at scrape time.
Nothing here keeps state: the driver hands the rows over and stores the lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from streaming.lag.book import GroupLag, Row
from streaming.metrics import compat
from streaming.metrics.exposition import Family, Lines
from streaming.metrics.groups import MemberLabels, member_labels
from streaming.metrics.live import HEALTH, RETENTION_FAMILIES, retention_lines
from streaming.protocol import GroupSummary, OffsetsTopicGap, TopicPartition

G, C = "gauge", "counter"

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


def lag_lines(lines: Lines, view: GroupLag, per_partition: bool, kafka_exporter: bool = False) -> None:
    """Per-partition lag (partition granularity), per-topic / per-group aggregates, member lag, truncations,
    retention and the verdict. Lag in seconds is an age: the lines keep when the next record was written
    and scrapes show how long ago that was."""
    group = view.group
    per_topic: dict[str, list[Row]] = {}
    partitions = sorted(view.rows.items())
    for (topic, _), row in partitions:
        per_topic.setdefault(topic, []).append(row)
    if per_partition:
        by_group = (("group", group),)
        lines.add_many(_F["kafka_consumergroup_partition_lag"], by_group, [(tp, row[0]) for tp, row in partitions])
        for (topic, partition), row in partitions:
            if row[1] is not None:
                lines.add_age(_F["kafka_consumergroup_partition_lag_seconds"],
                              (*by_group, ("topic", topic), ("partition", str(partition)),
                               ("method", view.methods.get((topic, partition), ""))), row[1])
        lines.add_many(_F["kafka_consumergroup_partition_lag_uncommitted"], by_group, view.uncommitted.items())
    everything: list[Row] = []
    for topic, rows in per_topic.items():
        _aggregates(lines, (("group", group), ("topic", topic)), rows, "kafka_consumergroup_topic_")
        everything.extend(rows)
    if everything:
        _aggregates(lines, (("group", group),), everything, "kafka_consumergroup_")
    found: dict[TopicPartition, Row] = {**view.rows, **{tp: (lag, None) for tp, lag in view.uncommitted.items()}}
    for owner_labels, parts in view.owned.items():
        member_rows = [found[tp] for tp in parts if tp in found]
        if member_rows:
            member: MemberLabels = (("group", group), *owner_labels)
            lines.add(_F["kafka_consumergroup_member_lag"], member, sum(lag for lag, _ in member_rows))
            oldest = _oldest(member_rows)
            if oldest is not None:
                lines.add_age(_F["kafka_consumergroup_member_lag_seconds"], member, oldest)
    for topic, count in sorted(view.truncations.items()):
        lines.add(_F["kafka_consumergroup_lag_truncations_total"], (("group", group), ("topic", topic)), count)
    retention_lines(lines, group, view.margins, view.lost, per_partition, view.retention_deadline)
    if view.verdict is not None:
        lines.add(HEALTH, (("group", group), *zip(("status", "reason"), view.verdict, strict=True)), 1)
    if kafka_exporter:
        compat.lag_lines(lines, group, list(view.compat_rows), per_partition)


def log_end_text(cluster: str, ends: Mapping[TopicPartition, tuple[int, int]], kafka_exporter: bool) -> bytes:
    """The sampled log ends ((log start, log end) by partition), and kafka_exporter's topic families."""
    lines = Lines(cluster)
    for (topic, partition), (_, log_end) in sorted(ends.items()):
        lines.add(LOG_END_FAMILY, (("topic", topic), ("partition", str(partition))), log_end)
    chunks = [LOG_END_FAMILY.header, lines.encoded().get(LOG_END_FAMILY.name, b"")]
    if kafka_exporter:
        topics = Lines(cluster)
        compat.topic_lines(topics, dict(ends))
        encoded = topics.encoded()
        chunks += [f.header + encoded.get(f.name, b"") for f in compat.TOPIC_FAMILIES]
    return b"".join(chunks)


def poller_text(cluster: str, last_round: float | None, errors: Mapping[str, int], unresolved: Mapping[str, int],
                timestamp_types: Mapping[str, str], gaps: Mapping[int, OffsetsTopicGap], now: float) -> bytes:
    """The lag poller's health at scrape time: its last round, its errors, unresolved topic ids, the
    tracked topics' timestamp types and the offsets topic's open transactions."""
    lines = Lines(cluster)
    for reason, count in sorted(errors.items()):
        lines.add(POLL_ERRORS_FAMILY, (("reason", reason),), count)
    for reason, count in sorted(unresolved.items()):
        lines.add(UNRESOLVED_TOPIC_IDS_FAMILY, (("reason", reason),), count)
    for topic, kind in sorted(timestamp_types.items()):
        lines.add(TIMESTAMP_TYPE_FAMILY, (("topic", topic), ("type", kind)), 1)
    for partition, gap in sorted(gaps.items()):
        labels = (("partition", str(partition)),)
        lines.add(OFFSETS_TOPIC_GAP_FAMILY, labels, gap.gap)
        if gap.stuck_since is not None:
            lines.add(OFFSETS_TOPIC_STUCK_FAMILY, labels, max(0.0, now - gap.stuck_since))
    text = lines.encoded()
    chunks = [POLL_TIMESTAMP_FAMILY.header]
    if last_round is not None:
        chunks.append(f'{POLL_TIMESTAMP_FAMILY.name}{{{lines.prefix}}} {last_round!r}\n'.encode())
    for family in (POLL_ERRORS_FAMILY, UNRESOLVED_TOPIC_IDS_FAMILY, OFFSETS_TOPIC_GAP_FAMILY,
                   OFFSETS_TOPIC_STUCK_FAMILY, TIMESTAMP_TYPE_FAMILY):
        chunks += [family.header, text.get(family.name, b"")]
    return b"".join(chunks)


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

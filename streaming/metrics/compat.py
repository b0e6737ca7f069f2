"""``--metrics-compat kafka_exporter``: kafka_exporter's own consumer-group families, beside ours.

An operator replacing kafka_exporter keeps its dashboards and alert rules: the same family
names with its ``consumergroup`` label, with kafka_exporter's meanings (read from its code,
kafka_exporter.go, with its default ``--offset.show-all``): a topic the group committed to
(a "consumed" topic) lists every partition of the topic, a partition without a commit
showing -1 as both offset and lag; ``_sum`` families add up one topic's partitions (the
offset sum counts the -1s; the lag sum leaves out the -1 lags of uncommitted partitions and
keeps negative lags); lag is not clamped at 0. A topic without any commit is left out.

Differences (docs/metrics.md, *kafka_exporter compatibility*, gives each with its reason):
values come from this job's view (committed offsets from the offsets topic, log ends from
its poller); the partitions of a consumed topic known here are those the group committed
or is assigned, and every partition numbered below the highest of those (Kafka numbers a
topic's partitions from 0 without gaps), not the partitions past it; partitions whose lag
is not known yet, or whose commit overtook the last log-end sample, have no
``kafka_consumergroup_lag`` series and are not in the lag sum; only partitions some group
commits to or is assigned get topic offsets; every series has the job's ``cluster`` label.
Off by default: both exporters on one Prometheus would count every lag twice.
"""

from __future__ import annotations

from streaming.metrics.exposition import Family, Lines

COMPAT_MODES = ("none", "kafka_exporter")
G = "gauge"

MEMBERS = Family("kafka_consumergroup_members", G, "Amount of members in a consumer group (kafka_exporter's).")
GROUP_FAMILIES = (MEMBERS,)
CURRENT_OFFSET = Family("kafka_consumergroup_current_offset", G,
                        "Current Offset of a ConsumerGroup at Topic/Partition (kafka_exporter's; -1: no commit).")
CURRENT_OFFSET_SUM = Family("kafka_consumergroup_current_offset_sum", G,
                            "Current Offset of a ConsumerGroup at Topic for all partitions (kafka_exporter's).")
LAG = Family("kafka_consumergroup_lag", G,
             "Current Approximate Lag of a ConsumerGroup at Topic/Partition (kafka_exporter's; -1: no commit).")
LAG_SUM = Family("kafka_consumergroup_lag_sum", G,
                 "Current Approximate Lag of a ConsumerGroup at Topic for all partitions (kafka_exporter's).")
LAG_FAMILIES = (CURRENT_OFFSET, CURRENT_OFFSET_SUM, LAG, LAG_SUM)
TOPIC_CURRENT_OFFSET = Family("kafka_topic_partition_current_offset", G,
                              "Current Offset of a Broker at Topic/Partition (kafka_exporter's).")
TOPIC_OLDEST_OFFSET = Family("kafka_topic_partition_oldest_offset", G,
                             "Oldest Offset of a Broker at Topic/Partition (kafka_exporter's).")
TOPIC_FAMILIES = (TOPIC_CURRENT_OFFSET, TOPIC_OLDEST_OFFSET)

# One partition as kafka_exporter shows it: topic, partition, committed offset (-1: none), lag
# (-1: no commit; None: not known yet).
CompatRow = tuple[str, int, int, int | None]


def members_lines(lines: Lines, group: str, members: int) -> None:
    lines.add(MEMBERS, (("consumergroup", group),), members)


def lag_lines(lines: Lines, group: str, rows: list[CompatRow], per_partition: bool) -> None:
    """A group's offsets and lag for every topic it committed to (per partition at partition granularity)."""
    committed_topics = {topic for topic, _, offset, _ in rows if offset >= 0}
    rows = [*rows, *_uncommitted_below(rows, committed_topics)]
    sums: dict[str, list[int]] = {}
    for topic, partition, offset, lag in sorted(rows):
        if topic not in committed_topics:
            continue
        offset_sum, lag_sum = sums.setdefault(topic, [0, 0])
        sums[topic] = [offset_sum + offset, lag_sum + (lag if lag is not None and offset >= 0 else 0)]
        if per_partition:
            labels = (("consumergroup", group), ("topic", topic), ("partition", str(partition)))
            lines.add(CURRENT_OFFSET, labels, offset)
            if lag is not None:
                lines.add(LAG, labels, lag)
    for topic, (offset_sum, lag_sum) in sums.items():
        lines.add(CURRENT_OFFSET_SUM, (("consumergroup", group), ("topic", topic)), offset_sum)
        lines.add(LAG_SUM, (("consumergroup", group), ("topic", topic)), lag_sum)


def _uncommitted_below(rows: list[CompatRow], topics: set[str]) -> list[CompatRow]:
    """kafka_exporter lists every partition of a consumed topic, -1 where the group has no commit. The
    partitions known to exist here are those numbered below the highest one seen (a topic's partitions
    are numbered from 0 without gaps): the ones the group neither committed nor is assigned get -1."""
    seen: dict[str, set[int]] = {}
    for topic, partition, _, _ in rows:
        if topic in topics:
            seen.setdefault(topic, set()).add(partition)
    return [(topic, partition, -1, -1) for topic, partitions in seen.items()
            for partition in range(max(partitions)) if partition not in partitions]


def topic_lines(lines: Lines, offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
    """Log end and log start of each sampled partition, as kafka_exporter's topic families."""
    for (topic, partition), (start, end) in sorted(offsets.items()):
        labels = (("topic", topic), ("partition", str(partition)))
        lines.add(TOPIC_CURRENT_OFFSET, labels, end)
        lines.add(TOPIC_OLDEST_OFFSET, labels, start)
